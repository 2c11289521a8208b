//! The deterministic, seed-shaped workload: small molecules with a topology
//! and a relaxation trajectory, each record regenerated from its own stream.

use super::*;

/// SplitMix64 finalizer.
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64: small, fast, and the same on every platform.
pub(super) struct Rng(u64);

impl Rng {
    /// The stream of record `r`: records can be regenerated independently.
    pub(super) fn for_record(seed: u64, r: u64) -> Rng {
        Rng(mix(seed ^ 0x6d72_6563_2d62_656e) ^ mix(r.wrapping_add(0x5eed)))
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    pub(super) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub(super) fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in 0..n (n > 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Elements of small organic molecules with their share of atoms (per mille).
pub(super) const ELEMENTS: [(&str, u64, u64); 7] = [
    ("H", 1, 460),
    ("C", 6, 340),
    ("N", 7, 70),
    ("O", 8, 90),
    ("F", 9, 15),
    ("S", 16, 15),
    ("Cl", 17, 10),
];
pub(super) const HYDROGEN: usize = 0;
pub(super) const CARBON: usize = 1;

/// One relaxation step of one molecule.
pub(super) struct Snapshot {
    pub(super) x: Vec<f64>,
    pub(super) y: Vec<f64>,
    pub(super) z: Vec<f64>,
    pub(super) fx: Vec<f64>,
    pub(super) fy: Vec<f64>,
    pub(super) fz: Vec<f64>,
    pub(super) pe: f64,
}

/// One generated molecule and its relaxation.
pub(super) struct Molecule {
    /// Indices into [`ELEMENTS`], heavy atoms first.
    pub(super) elements: Vec<usize>,
    /// A spanning tree over the atoms.
    pub(super) bonds: Vec<[u64; 2]>,
    pub(super) frames: Vec<Snapshot>,
    /// Molecule code: Hill formula and record number.
    pub(super) code: String,
}

impl Molecule {
    /// Record `r` of the workload of `seed`: 10-60 atoms (about 30 on
    /// average), 1-48 frames (about 24 on average).
    pub(super) fn generate(seed: u64, r: u64) -> Molecule {
        let mut rng = Rng::for_record(seed, r);
        let u = rng.unit();
        // u^1.5 has mean 0.4: 10 + 50 * 0.4 = 30 atoms on average.
        let n = 10 + (50.0 * u * u.sqrt()).round() as usize;
        let n_frames = 1 + rng.below(48) as usize;
        let mut elements: Vec<usize> = (0..n)
            .map(|i| {
                if i == 0 {
                    return CARBON;
                }
                let mut t = rng.below(1000);
                ELEMENTS
                    .iter()
                    .position(|&(_, _, w)| {
                        let hit = t < w;
                        t = t.saturating_sub(w);
                        hit
                    })
                    .unwrap_or(CARBON)
            })
            .collect();
        // Heavy atoms first, hydrogens last (a stable order).
        elements.sort_by_key(|&e| e == HYDROGEN);
        let heavy = elements.iter().filter(|&&e| e != HYDROGEN).count() as u64;
        let mut bonds = Vec::with_capacity(n - 1);
        for i in 1..n as u64 {
            // Heavy atoms form a tree; each hydrogen hangs on a heavy atom.
            let parent = if i < heavy {
                rng.below(i)
            } else {
                rng.below(heavy)
            };
            bonds.push([parent, i]);
        }
        let mut pos: Vec<[f64; 3]> = (0..n)
            .map(|_| {
                [
                    rng.uniform(-5.0, 5.0),
                    rng.uniform(-5.0, 5.0),
                    rng.uniform(-5.0, 5.0),
                ]
            })
            .collect();
        let pe0 = rng.uniform(-900.0, -100.0);
        let drop = rng.uniform(1.0, 100.0);
        let tau = (n_frames as f64 / 4.0).max(1.0);
        let mut frames = Vec::with_capacity(n_frames);
        for k in 0..n_frames {
            let amplitude = 1.0 - 0.8 * k as f64 / n_frames as f64;
            let mut s = Snapshot {
                x: Vec::with_capacity(n),
                y: Vec::with_capacity(n),
                z: Vec::with_capacity(n),
                fx: Vec::with_capacity(n),
                fy: Vec::with_capacity(n),
                fz: Vec::with_capacity(n),
                pe: pe0 - drop * k as f64 / (k as f64 + tau),
            };
            for p in &mut pos {
                let f = [
                    amplitude * rng.uniform(-1.0, 1.0),
                    amplitude * rng.uniform(-1.0, 1.0),
                    amplitude * rng.uniform(-1.0, 1.0),
                ];
                s.x.push(p[0]);
                s.y.push(p[1]);
                s.z.push(p[2]);
                s.fx.push(f[0]);
                s.fy.push(f[1]);
                s.fz.push(f[2]);
                // A steepest-descent step along the force.
                for a in 0..3 {
                    p[a] += 0.02 * f[a];
                }
            }
            frames.push(s);
        }
        let code = format!("{}-{r:06}", hill_formula(&elements));
        Molecule {
            elements,
            bonds,
            frames,
            code,
        }
    }

    pub(super) fn n_atoms(&self) -> usize {
        self.elements.len()
    }

    /// Bit `Z` set for every atomic number `Z` present.
    pub(super) fn element_mask(&self) -> u64 {
        self.elements
            .iter()
            .fold(0, |m, &e| m | 1u64 << ELEMENTS[e].1)
    }

    pub(super) fn heavy_atoms(&self) -> u64 {
        self.elements.iter().filter(|&&e| e != HYDROGEN).count() as u64
    }

    /// Bytes of every column buffer and string this record hands the writer
    /// (system, trajectory, per-step `pe`, own index row); documents and the
    /// binding's own index columns are not counted.
    pub(super) fn payload_bytes(&self) -> u64 {
        let n = self.n_atoms() as u64;
        let strings: u64 = self
            .elements
            .iter()
            .map(|&e| ELEMENTS[e].0.len() as u64)
            .sum();
        let system = strings + 8 * n + 16 * self.bonds.len() as u64;
        let trajectory = self.frames.len() as u64 * (6 * 8 * n + 8);
        let index = self.code.len() as u64 + 8 + 8;
        system + trajectory + index
    }

    /// The molecule as a model record (consumes the arrays).
    pub(super) fn into_record(self) -> Record {
        let n = self.n_atoms() as u64;
        let column = |data: ColumnData| Column::new(vec![n], data);
        let atoms = Block {
            count: n,
            columns: BTreeMap::from([
                (
                    "element".to_string(),
                    column(ColumnData::String(
                        self.elements
                            .iter()
                            .map(|&e| ELEMENTS[e].0.to_string())
                            .collect(),
                    )),
                ),
                (
                    "atomic_number".to_string(),
                    column(ColumnData::U64(
                        self.elements.iter().map(|&e| ELEMENTS[e].1).collect(),
                    )),
                ),
            ]),
            ..Block::default()
        };
        let n_bonds = self.bonds.len() as u64;
        let bonds = Block {
            count: n_bonds,
            columns: BTreeMap::from([
                (
                    "atomi".to_string(),
                    Column::new(
                        vec![n_bonds],
                        ColumnData::U64(self.bonds.iter().map(|b| b[0]).collect()),
                    ),
                ),
                (
                    "atomj".to_string(),
                    Column::new(
                        vec![n_bonds],
                        ColumnData::U64(self.bonds.iter().map(|b| b[1]).collect()),
                    ),
                ),
            ]),
            ..Block::default()
        };
        let system = Frame {
            blocks: BTreeMap::from([("atoms".to_string(), atoms), ("bonds".to_string(), bonds)]),
            ..Frame::default()
        };
        let frames = self
            .frames
            .into_iter()
            .enumerate()
            .map(|(k, s)| {
                let f64s = |v: Vec<f64>| column(ColumnData::F64(v));
                let atoms = Block {
                    count: n,
                    columns: BTreeMap::from([
                        ("x".to_string(), f64s(s.x)),
                        ("y".to_string(), f64s(s.y)),
                        ("z".to_string(), f64s(s.z)),
                        ("fx".to_string(), f64s(s.fx)),
                        ("fy".to_string(), f64s(s.fy)),
                        ("fz".to_string(), f64s(s.fz)),
                    ]),
                    ..Block::default()
                };
                let mut meta = Document::new();
                meta.insert("pe".into(), json!(s.pe));
                Step {
                    step: k as i64,
                    time: None,
                    meta,
                    blocks: BTreeMap::from([("atoms".to_string(), atoms)]),
                    cell: None,
                }
            })
            .collect();
        let mut meta = Document::new();
        meta.insert("code".into(), Value::String(self.code));
        Record {
            meta,
            system: Some(system),
            trajectory: Some(Trajectory {
                schema: None,
                frames,
            }),
        }
    }
}

/// The header the benchmark writes for `n` records of the workload of `seed`
/// (public for profiling drivers such as `examples/write_profile.rs`).
pub fn workload_header(seed: u64, n: u64) -> Header {
    let mut collection_meta = Document::new();
    collection_meta.insert(
        "units".into(),
        json!({"length": "angstrom", "energy": "kcal/mol", "force": "kcal/mol/angstrom"}),
    );
    collection_meta.insert(
        "source".into(),
        json!(format!("mrec bench, seed {seed}, {n} records")),
    );
    Header {
        meta: collection_meta,
        sequence_schema: Some(sequence_schema()),
        forcefield: None,
    }
}

/// Record `r` of the workload of `seed`, exactly as the benchmark hands it
/// to the writer (public for profiling drivers).
pub fn workload_record(seed: u64, r: u64) -> Record {
    Molecule::generate(seed, r).into_record()
}

/// `C`, `H`, then the others alphabetically (Hill order).
pub(super) fn hill_formula(elements: &[usize]) -> String {
    let mut counts = [0usize; ELEMENTS.len()];
    for &e in elements {
        counts[e] += 1;
    }
    let mut order: Vec<usize> = (0..ELEMENTS.len())
        .filter(|&e| e != CARBON && e != HYDROGEN)
        .collect();
    order.sort_by_key(|&e| ELEMENTS[e].0);
    let mut out = String::new();
    for e in [CARBON, HYDROGEN].into_iter().chain(order) {
        match counts[e] {
            0 => {}
            1 => out.push_str(ELEMENTS[e].0),
            c => out.push_str(&format!("{}{c}", ELEMENTS[e].0)),
        }
    }
    out
}

/// The one trajectory declaration: atoms x y z fx fy fz, per-step pe.
pub(super) fn sequence_schema() -> SequenceSchema {
    let f64_col = || ColumnDecl {
        dtype: DType::F64,
        trailing: vec![],
        nullable: false,
        precision: None,
    };
    SequenceSchema {
        blocks: BTreeMap::from([(
            "atoms".to_string(),
            BlockDecl {
                columns: ["x", "y", "z", "fx", "fy", "fz"]
                    .iter()
                    .map(|c| (c.to_string(), f64_col()))
                    .collect(),
                ..BlockDecl::default()
            },
        )]),
        meta: BTreeMap::from([(
            "pe".to_string(),
            MetaDecl {
                tag: MetaTag::F64,
                fill: None,
            },
        )]),
    }
}

/// A permutation of `0..n` (Fisher-Yates), from the seed.
pub(super) fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n).collect();
    let mut rng = Rng(mix(seed ^ 0x5348_5546_464c_4521));
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}
