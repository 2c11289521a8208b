//! ASE rows -> molrec records: the mapping of `docs/import.md`, whose
//! machine-readable form is `mapping.json` beside this file (a test holds
//! the two to each other).
//!
//! One record is built from one row (the default) or from the rows of one
//! group (`--group-by`), in order. Topology (`atomic_number`, `element`)
//! and the other per-atom inputs of an `Atoms` object (charges, masses,
//! tags, initial magnetic moments, fixed atoms) go to the record's
//! `system` when the record's rows agree on them bit for bit (always, for
//! one row), else to its trajectory. Positions and calculator results are
//! per step. A column that some rows of a group lack is masked (its
//! validity false) in those rows, so the record's column set stays stable.

use super::decode::{f64_json, marked_float, Arr, Flat, Row};
use super::*;
use molrec::model::{
    Block, BlockDecl, Cell, Column, ColumnData, ColumnDecl, Frame, MetaDecl, Record,
    SequenceSchema, Step, Trajectory,
};
use molrec::typed_json::MetaTag;
use molrec::DType;

/// The mapping table, machine-readable (`mrec.ase_mapping()` in Python).
pub const MAPPING_JSON: &str = include_str!("mapping.json");

/// Element symbols by atomic number, as `ase.data.chemical_symbols`.
pub const SYMBOLS: [&str; 119] = [
    "X", "H", "He", "Li", "Be", "B", "C", "N", "O", "F", "Ne", "Na", "Mg", "Al", "Si", "P", "S",
    "Cl", "Ar", "K", "Ca", "Sc", "Ti", "V", "Cr", "Mn", "Fe", "Co", "Ni", "Cu", "Zn", "Ga", "Ge",
    "As", "Se", "Br", "Kr", "Rb", "Sr", "Y", "Zr", "Nb", "Mo", "Tc", "Ru", "Rh", "Pd", "Ag", "Cd",
    "In", "Sn", "Sb", "Te", "I", "Xe", "Cs", "Ba", "La", "Ce", "Pr", "Nd", "Pm", "Sm", "Eu", "Gd",
    "Tb", "Dy", "Ho", "Er", "Tm", "Yb", "Lu", "Hf", "Ta", "W", "Re", "Os", "Ir", "Pt", "Au", "Hg",
    "Tl", "Pb", "Bi", "Po", "At", "Rn", "Fr", "Ra", "Ac", "Th", "Pa", "U", "Np", "Pu", "Am", "Cm",
    "Bk", "Cf", "Es", "Fm", "Md", "No", "Lr", "Rf", "Db", "Sg", "Bh", "Hs", "Mt", "Ds", "Rg", "Cn",
    "Nh", "Fl", "Mc", "Lv", "Ts", "Og",
];

/// The block every per-atom column is in.
pub const ATOMS: &str = "atoms";

/// The collection's units: ASE's (`ase.units`): lengths in angstrom,
/// energies in eV, forces in eV/angstrom, charges in e, masses in amu.
pub fn units() -> Value {
    json!({
        "length": "angstrom",
        "energy": "eV",
        "force": "eV/angstrom",
        "charge": "e",
        "mass": "amu",
    })
}

/// The per-step meta every record declares (the same in every record, as
/// the collection rules require): calculator scalars and vectors, each
/// with a NaN fill for rows that lack it; with `--group-by`, also `ase`
/// (json, fill null): the row's own document.
pub fn step_meta(grouped: bool) -> BTreeMap<String, MetaDecl> {
    let nan = || f64_json(f64::NAN);
    let mut m = BTreeMap::from([
        ("pe".to_string(), (MetaTag::F64, nan())),
        ("free_energy".to_string(), (MetaTag::F64, nan())),
        ("total_magmom".to_string(), (MetaTag::F64, nan())),
        (
            "stress".to_string(),
            (MetaTag::F64x6, Value::Array(vec![nan(); 6])),
        ),
        (
            "dipole".to_string(),
            (MetaTag::F64x3, Value::Array(vec![nan(); 3])),
        ),
    ]);
    if grouped {
        m.insert("ase".to_string(), (MetaTag::Json, Value::Null));
    }
    m.into_iter()
        .map(|(k, (tag, fill))| {
            (
                k,
                MetaDecl {
                    tag,
                    fill: Some(fill),
                },
            )
        })
        .collect()
}

/// Per-step columns: name, dtype, trailing shape.
const STEP_COLUMNS: &[(&str, DType, &[u64])] = &[
    ("x", DType::F64, &[]),
    ("y", DType::F64, &[]),
    ("z", DType::F64, &[]),
    ("fx", DType::F64, &[]),
    ("fy", DType::F64, &[]),
    ("fz", DType::F64, &[]),
    ("px", DType::F64, &[]),
    ("py", DType::F64, &[]),
    ("pz", DType::F64, &[]),
    ("partial_charge", DType::F64, &[]),
    ("magmom", DType::F64, &[]),
    ("magmom_xyz", DType::F64, &[3]),
    ("atom_energy", DType::F64, &[]),
];

/// Columns that go to the system when a record's rows agree on them.
const SYSTEM_COLUMNS: &[(&str, DType, &[u64])] = &[
    ("atomic_number", DType::U64, &[]),
    ("element", DType::String, &[]),
    ("charge", DType::F64, &[]),
    ("mass", DType::F64, &[]),
    ("tag", DType::I64, &[]),
    ("initial_magmom", DType::F64, &[]),
    ("initial_magmom_xyz", DType::F64, &[3]),
    ("fixed", DType::Bool, &[]),
    ("fixed_cartesian", DType::Bool, &[3]),
];

/// The declared per-row shape of a column of the mapping.
fn trailing_of(name: &str) -> &'static [u64] {
    STEP_COLUMNS
        .iter()
        .chain(SYSTEM_COLUMNS)
        .find(|c| c.0 == name)
        .map_or(&[], |c| c.2)
}

/// The collection's declaration, given to the writer: every column the
/// mapping can put in a trajectory (with `--group-by`, also the system
/// columns, which go to the trajectory when a group's rows differ; all
/// nullable, as a row of a group may lack a column others have), and the
/// per-step meta of [`step_meta`]. Given rather than derived so that the
/// per-step keys have fills and records may carry different columns.
pub fn declaration(grouped: bool) -> SequenceSchema {
    let mut block = BlockDecl::default();
    let columns = STEP_COLUMNS
        .iter()
        .chain(if grouped { SYSTEM_COLUMNS } else { &[] });
    for &(name, dtype, trailing) in columns {
        block.columns.insert(
            name.to_string(),
            ColumnDecl {
                dtype,
                trailing: trailing.to_vec(),
                nullable: grouped,
                precision: None,
            },
        );
    }
    SequenceSchema {
        blocks: BTreeMap::from([(ATOMS.to_string(), block)]),
        meta: step_meta(grouped),
    }
}

/// A per-atom column of one row: values and per-row trailing shape.
#[derive(Clone, Debug)]
struct Col {
    data: ColumnData,
    trailing: Vec<u64>,
}

impl Col {
    fn same(&self, other: &Col) -> bool {
        self.trailing == other.trailing && self.data.same_bits(&other.data)
    }
}

/// One row read into columns, cell, step meta and its document.
pub struct Parsed {
    n: u64,
    /// Columns that go to the system when constant: name -> column.
    sys: BTreeMap<&'static str, Col>,
    /// Per-step columns.
    traj: BTreeMap<&'static str, Col>,
    cell: Option<Cell>,
    meta: Map<String, Value>,
    /// The row's document: record meta (one row) or per-step `ase`.
    pub doc: Map<String, Value>,
}

/// Reads one row into [`Parsed`]; `Err` names the key and what is wrong.
/// What the mapping changed or kept aside is counted in `tally`.
pub fn parse(
    row: Row,
    shard: &str,
    id: u64,
    tally: &mut Tally,
) -> std::result::Result<Parsed, String> {
    let numbers = row
        .numbers
        .ok_or("not an ASE row: no `numbers`".to_string())?;
    let Flat::I64(z) = &numbers.data else {
        return Err("`numbers`: not an integer array".into());
    };
    if numbers.shape.len() != 1 {
        return Err(format!(
            "`numbers`: shape {:?}, expected [n]",
            numbers.shape
        ));
    }
    let n = z.len() as u64;
    let mut elements = Vec::with_capacity(z.len());
    let mut atomic = Vec::with_capacity(z.len());
    for (i, &zi) in z.iter().enumerate() {
        let symbol = usize::try_from(zi)
            .ok()
            .and_then(|k| SYMBOLS.get(k))
            .ok_or_else(|| format!("`numbers`[{i}] = {zi} is not an atomic number (0 to 118)"))?;
        elements.push(symbol.to_string());
        atomic.push(zi as u64);
    }
    let mut sys = BTreeMap::new();
    let mut traj = BTreeMap::new();
    let plain = |data| Col {
        data,
        trailing: vec![],
    };
    sys.insert("atomic_number", plain(ColumnData::U64(atomic)));
    sys.insert("element", plain(ColumnData::String(elements)));
    let positions = row
        .positions
        .ok_or("not an ASE row: no `positions`".to_string())?;
    for (name, col) in ["x", "y", "z"]
        .into_iter()
        .zip(xyz("positions", &positions, n)?)
    {
        traj.insert(name, col);
    }
    for (key, arr) in &row.arrays {
        match key.as_str() {
            "forces" => {
                for (name, col) in ["fx", "fy", "fz"].into_iter().zip(xyz(key, arr, n)?) {
                    traj.insert(name, col);
                }
            }
            "momenta" => {
                for (name, col) in ["px", "py", "pz"].into_iter().zip(xyz(key, arr, n)?) {
                    traj.insert(name, col);
                }
            }
            "initial_charges" => {
                sys.insert("charge", per_atom(key, arr, n, false)?);
            }
            "masses" => {
                sys.insert("mass", per_atom(key, arr, n, false)?);
            }
            "initial_magmoms" => {
                let c = per_atom(key, arr, n, true)?;
                let name = if c.trailing.is_empty() {
                    "initial_magmom"
                } else {
                    "initial_magmom_xyz"
                };
                sys.insert(name, c);
            }
            "tags" => {
                let Flat::I64(v) = &arr.data else {
                    return Err("`tags`: not an integer array".into());
                };
                if arr.shape != [n] {
                    return Err(format!("`tags`: shape {:?}, expected [{n}]", arr.shape));
                }
                sys.insert("tag", plain(ColumnData::I64(v.clone())));
            }
            "charges" => {
                traj.insert("partial_charge", per_atom(key, arr, n, false)?);
            }
            "magmoms" => {
                let c = per_atom(key, arr, n, true)?;
                let name = if c.trailing.is_empty() {
                    "magmom"
                } else {
                    "magmom_xyz"
                };
                traj.insert(name, c);
            }
            "energies" => {
                traj.insert("atom_energy", per_atom(key, arr, n, false)?);
            }
            _ => {}
        }
    }
    let cell = cell_of(row.cell.as_ref(), row.pbc.as_ref())?;
    let mut meta = Map::new();
    for (key, &x) in &row.scalars {
        let name = match key.as_str() {
            "energy" => "pe",
            "free_energy" => "free_energy",
            _ => "total_magmom",
        };
        meta.insert(name.into(), f64_json(x));
    }
    if !row.scalars.contains_key("energy") {
        tally.change("no `energy`: per-step pe reads as its fill, NaN");
    }
    for (key, arr) in &row.vectors {
        let Some(v) = arr.f64s() else {
            return Err(format!("`{key}`: not a float array"));
        };
        let v = match (key.as_str(), v.len()) {
            ("stress", 6) | ("dipole", 3) => v,
            ("stress", 9) => {
                tally.change("`stress` 3x3 written as Voigt [xx, yy, zz, yz, xz, xy]");
                vec![v[0], v[4], v[8], v[5], v[2], v[1]]
            }
            _ => {
                return Err(format!(
                    "`{key}`: shape {:?}, expected {}",
                    arr.shape,
                    if key == "stress" {
                        "[6] or [3, 3]"
                    } else {
                        "[3]"
                    }
                ))
            }
        };
        meta.insert(
            key.clone(),
            Value::Array(v.into_iter().map(f64_json).collect()),
        );
    }
    let mut doc = Map::new();
    doc.insert("shard".into(), Value::from(shard));
    doc.insert("id".into(), Value::from(id));
    let mut kept = Vec::new();
    if let Some(constraints) = row.constraints {
        let Value::Array(list) = constraints else {
            return Err("`constraints`: not a list".into());
        };
        for c in list {
            match constraint(&c, n)? {
                Some((name, col)) => {
                    tally.map(match name {
                        "fixed" => "FixAtoms -> atoms.fixed",
                        _ => "FixCartesian -> atoms.fixed_cartesian",
                    });
                    match sys.get_mut(name) {
                        // Two constraints of one kind: either fixes.
                        Some(Col {
                            data: ColumnData::Bool(have),
                            ..
                        }) => {
                            if let ColumnData::Bool(more) = col.data {
                                have.iter_mut().zip(more).for_each(|(h, m)| *h |= m);
                            }
                        }
                        _ => {
                            sys.insert(name, col);
                        }
                    }
                }
                None => {
                    let name = constraint_name(&c).unwrap_or_else(|| "?".into());
                    tally.keep(format!(
                        "constraint {name} (no column): record meta `constraints`"
                    ));
                    kept.push(c);
                }
            }
        }
    }
    for (key, value) in row.other {
        doc.insert(key, value);
    }
    if !row.key_value_pairs.is_empty() {
        doc.insert("key_value_pairs".into(), Value::Object(row.key_value_pairs));
    }
    if let Some(data) = row.data {
        if data.as_object().is_none_or(|m| !m.is_empty()) {
            doc.insert("data".into(), data);
        }
    }
    if !kept.is_empty() {
        doc.insert("constraints".into(), Value::Array(kept));
    }
    let mut doc = Value::Object(doc);
    unmark(&mut doc, tally);
    let Value::Object(doc) = doc else {
        unreachable!("an object stays one")
    };
    Ok(Parsed {
        n,
        sys,
        traj,
        cell,
        meta,
        doc,
    })
}

/// A `[n, 3]` float array as three columns.
fn xyz(key: &str, arr: &Arr, n: u64) -> std::result::Result<[Col; 3], String> {
    if arr.shape != [n, 3] {
        return Err(format!("`{key}`: shape {:?}, expected [{n}, 3]", arr.shape));
    }
    let converted;
    let v: &[f64] = match &arr.data {
        Flat::F64(v) => v,
        _ => {
            converted = arr
                .f64s()
                .ok_or_else(|| format!("`{key}`: not a float array"))?;
            &converted
        }
    };
    let n = n as usize;
    let (mut x, mut y, mut z) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for p in v.chunks_exact(3) {
        x.push(p[0]);
        y.push(p[1]);
        z.push(p[2]);
    }
    let col = |data| Col {
        data: ColumnData::F64(data),
        trailing: vec![],
    };
    Ok([col(x), col(y), col(z)])
}

/// A per-atom float array, `[n]` (or `[n, 3]` when `vector`).
fn per_atom(key: &str, arr: &Arr, n: u64, vector: bool) -> std::result::Result<Col, String> {
    let trailing = match arr.shape.as_slice() {
        [m] if *m == n => vec![],
        [m, 3] if *m == n && vector => vec![3],
        _ => {
            return Err(format!(
                "`{key}`: shape {:?}, expected [{n}]{}",
                arr.shape,
                if vector { " or [n, 3]" } else { "" }
            ))
        }
    };
    let v = arr
        .f64s()
        .ok_or_else(|| format!("`{key}`: not a float array"))?;
    Ok(Col {
        data: ColumnData::F64(v),
        trailing,
    })
}

/// ASE's cell (lattice vectors as rows) and pbc as a molrec box (lattice
/// vectors as columns): none for an all-zero cell without periodicity.
fn cell_of(cell: Option<&Arr>, pbc: Option<&Arr>) -> std::result::Result<Option<Cell>, String> {
    let vectors = match cell {
        None => [0.0; 9],
        Some(arr) => {
            let v = arr.f64s().ok_or("`cell`: not a float array")?;
            if arr.shape != [3, 3] {
                return Err(format!("`cell`: shape {:?}, expected [3, 3]", arr.shape));
            }
            let mut t = [0.0; 9];
            for r in 0..3 {
                for c in 0..3 {
                    t[c * 3 + r] = v[r * 3 + c];
                }
            }
            t
        }
    };
    let boundary = match pbc {
        None => [false; 3],
        Some(arr) => match (&arr.data, arr.shape.as_slice()) {
            (Flat::Bool(b), [3]) => [b[0], b[1], b[2]],
            (Flat::Bool(b), []) if b.len() == 1 => [b[0]; 3],
            (Flat::I64(b), [3]) => [b[0] != 0, b[1] != 0, b[2] != 0],
            _ => return Err(format!("`pbc`: shape {:?}, expected 3 bools", arr.shape)),
        },
    };
    if vectors.iter().all(|&x| x == 0.0) && !boundary.iter().any(|&b| b) {
        return Ok(None);
    }
    Ok(Some(Cell {
        vectors,
        origin: [0.0; 3],
        boundary,
        defined: true,
    }))
}

fn constraint_name(c: &Value) -> Option<String> {
    let name = c
        .get("name")
        .or_else(|| c.get("__name__"))
        .and_then(Value::as_str)?;
    Some(name.rsplit('.').next().unwrap_or(name).to_string())
}

/// `FixAtoms` -> `fixed` (bool per atom); `FixCartesian` ->
/// `fixed_cartesian` (bool per atom and axis, true = fixed); any other
/// constraint maps to no column (`None`).
fn constraint(c: &Value, n: u64) -> std::result::Result<Option<(&'static str, Col)>, String> {
    let name = constraint_name(c).ok_or("`constraints`: an entry without a name")?;
    let kwargs = c.get("kwargs").unwrap_or(c);
    let indices = |v: Option<&Value>| -> std::result::Result<Vec<usize>, String> {
        let list = match v {
            Some(Value::Array(l)) => l.clone(),
            Some(Value::Number(k)) => vec![Value::Number(k.clone())],
            _ => return Err(format!("`constraints`: {name} without indices")),
        };
        list.iter()
            .map(|i| {
                i.as_u64()
                    .filter(|&i| i < n)
                    .map(|i| i as usize)
                    .ok_or_else(|| format!("`constraints`: {name} index {i} is not an atom of {n}"))
            })
            .collect()
    };
    match name.as_str() {
        "FixAtoms" => {
            let mut fixed = vec![false; n as usize];
            for i in indices(kwargs.get("indices"))? {
                fixed[i] = true;
            }
            Ok(Some((
                "fixed",
                Col {
                    data: ColumnData::Bool(fixed),
                    trailing: vec![],
                },
            )))
        }
        "FixCartesian" => {
            let mask: Vec<bool> = match kwargs.get("mask") {
                Some(Value::Array(m)) if m.len() == 3 => m
                    .iter()
                    .map(|b| b.as_bool().or(b.as_i64().map(|i| i != 0)))
                    .collect::<Option<_>>()
                    .ok_or("`constraints`: FixCartesian mask is not 3 bools")?,
                _ => return Err("`constraints`: FixCartesian mask is not 3 bools".into()),
            };
            let mut fixed = vec![false; 3 * n as usize];
            for i in indices(kwargs.get("a"))? {
                fixed[3 * i..3 * i + 3].copy_from_slice(&mask);
            }
            Ok(Some((
                "fixed_cartesian",
                Col {
                    data: ColumnData::Bool(fixed),
                    trailing: vec![3],
                },
            )))
        }
        _ => Ok(None),
    }
}

/// Replaces the non-finite markers of a document by typed JSON's strings.
fn unmark(v: &mut Value, tally: &mut Tally) {
    match v {
        Value::String(s) => {
            if let Some(x) = marked_float(s) {
                *v = f64_json(x);
                tally.change("non-finite number in a document written as a string (\"NaN\")");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| unmark(i, tally)),
        Value::Object(m) => m.values_mut().for_each(|i| unmark(i, tally)),
        _ => {}
    }
}

/// How one record is laid out: its rows' documents go to record meta (one
/// row) or to per-step `ase` (a group, whose record meta is `group_meta`).
pub struct Shape {
    /// `Some`: a group's record meta; `None`: one row, its document.
    pub group_meta: Option<Map<String, Value>>,
    /// The step number of each row.
    pub steps: Vec<i64>,
}

/// Builds the record of `rows` (in order). `Err`: the rows cannot form one
/// record under the collection rules (say why).
pub fn build(
    mut rows: Vec<Parsed>,
    shape: Shape,
    tally: &mut Tally,
) -> std::result::Result<Record, String> {
    let grouped = shape.group_meta.is_some();
    let n0 = rows.first().map_or(0, |r| r.n);
    let same_n = rows.iter().all(|r| r.n == n0);
    let defined = rows.iter().filter(|r| r.cell.is_some()).count();
    if defined != 0 && defined != rows.len() {
        return Err(format!(
            "the cell is defined in {defined} of the group's {} rows: a record's \
             trajectory has one cell_defined flag (trajectory.box)",
            rows.len()
        ));
    }
    // System columns: on every row and the same bit for bit.
    let mut names: Vec<&'static str> = Vec::new();
    for r in &rows {
        for k in r.sys.keys() {
            if !names.contains(k) {
                names.push(k);
            }
        }
    }
    let mut system_cols = BTreeMap::new();
    let mut moved: Vec<&'static str> = Vec::new();
    for name in names {
        let first = rows[0].sys.get(name);
        let constant = same_n
            && first.is_some_and(|f| {
                rows[1..]
                    .iter()
                    .all(|r| r.sys.get(name).is_some_and(|c| c.same(f)))
            });
        if constant {
            let c = rows[0].sys.remove(name).expect("checked");
            let mut shape = vec![n0];
            shape.extend(&c.trailing);
            system_cols.insert(name.to_string(), Column::new(shape, c.data));
        } else {
            moved.push(name);
        }
    }
    // Trajectory columns: the union of the rows', masked where absent.
    let mut traj_names: Vec<(&'static str, bool)> = Vec::new();
    for r in &rows {
        for k in r
            .traj
            .keys()
            .chain(moved.iter().filter(|m| r.sys.contains_key(*m)))
        {
            if !traj_names.iter().any(|(n, _)| n == k) {
                traj_names.push((k, moved.contains(k)));
            }
        }
    }
    for &m in &moved {
        if !traj_names.iter().any(|(n, _)| *n == m) {
            traj_names.push((m, true));
        }
    }
    let mut frames = Vec::with_capacity(rows.len());
    for (mut r, step) in rows.into_iter().zip(&shape.steps) {
        let mut columns = BTreeMap::new();
        for &(name, from_sys) in &traj_names {
            let trailing = trailing_of(name);
            let mut shape = vec![r.n];
            shape.extend(trailing);
            let column = match if from_sys {
                r.sys.remove(name)
            } else {
                r.traj.remove(name)
            } {
                Some(c) => Column::new(shape, c.data),
                None => {
                    tally.change(format!(
                        "`{name}` absent from a row of a group whose other rows have it: masked (validity false)"
                    ));
                    Column {
                        validity: Some(vec![false; r.n as usize]),
                        ..Column::new(shape, empty_col(name, r.n, trailing))
                    }
                }
            };
            columns.insert(name.to_string(), column);
        }
        let mut meta = r.meta;
        if grouped {
            meta.insert("ase".into(), Value::Object(std::mem::take(&mut r.doc)));
        }
        frames.push((
            Step {
                step: *step,
                time: None,
                meta,
                blocks: BTreeMap::from([(
                    ATOMS.to_string(),
                    Block {
                        count: r.n,
                        columns,
                        ..Block::default()
                    },
                )]),
                cell: r.cell,
            },
            r.doc,
        ));
    }
    let mut docs = Vec::new();
    let steps: Vec<Step> = frames
        .into_iter()
        .map(|(s, d)| {
            docs.push(d);
            s
        })
        .collect();
    let meta = match shape.group_meta {
        Some(m) => m,
        None => docs.pop().unwrap_or_default(),
    };
    let system = (!system_cols.is_empty()).then(|| Frame {
        blocks: BTreeMap::from([(
            ATOMS.to_string(),
            Block {
                count: n0,
                columns: system_cols,
                ..Block::default()
            },
        )]),
        ..Frame::default()
    });
    Ok(Record {
        meta,
        system,
        trajectory: Some(Trajectory {
            schema: None,
            frames: steps,
        }),
    })
}

/// Zero values for a masked column of `n` rows.
fn empty_col(name: &str, n: u64, trailing: &[u64]) -> ColumnData {
    let len = (n * trailing.iter().product::<u64>()) as usize;
    match name {
        "atomic_number" => ColumnData::U64(vec![0; len]),
        "element" => ColumnData::String(vec![String::new(); len]),
        "tag" => ColumnData::I64(vec![0; len]),
        "fixed" | "fixed_cartesian" => ColumnData::Bool(vec![false; len]),
        _ => ColumnData::F64(vec![0.0; len]),
    }
}

/// The dtype each column name of the mapping has (for the table's test).
#[cfg(test)]
pub fn column_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "atomic_number" => DType::U64,
        "element" => DType::String,
        "tag" => DType::I64,
        "fixed" | "fixed_cartesian" => DType::Bool,
        _ => {
            return STEP_COLUMNS
                .iter()
                .chain(SYSTEM_COLUMNS)
                .find(|c| c.0 == name)
                .map(|c| c.1)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// `mapping.json` lists exactly the columns and per-step keys this code
    /// writes, with their dtypes.
    #[test]
    fn the_machine_readable_table_is_the_code() {
        let table: Value = serde_json::from_str(MAPPING_JSON).unwrap();
        let rows = table["mapping"].as_array().unwrap();
        let mut columns = BTreeSet::new();
        let mut meta = BTreeSet::new();
        for row in rows {
            let target = row["molrec"].as_str().unwrap();
            let dtype = row["dtype"].as_str().unwrap();
            if let Some(col) = target.strip_prefix("atoms.") {
                for c in col.split(',') {
                    let c = c.trim();
                    assert_eq!(
                        column_dtype(c).map(|d| d.to_string()).as_deref(),
                        Some(dtype),
                        "{c}"
                    );
                    columns.insert(c.to_string());
                }
            } else if let Some(key) = target.strip_prefix("step.meta.") {
                let decl = &step_meta(true)[key];
                assert_eq!(decl.tag.name(), dtype, "{key}");
                meta.insert(key.to_string());
            }
        }
        let want: BTreeSet<String> = [
            "atomic_number",
            "element",
            "tag",
            "fixed",
            "fixed_cartesian",
            "x",
            "y",
            "z",
            "fx",
            "fy",
            "fz",
            "px",
            "py",
            "pz",
            "charge",
            "mass",
            "initial_magmom",
            "partial_charge",
            "magmom",
            "atom_energy",
            "initial_magmom_xyz",
            "magmom_xyz",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(columns, want);
        assert_eq!(meta, step_meta(true).keys().cloned().collect());
        assert_eq!(table["units"], units());
    }
}
