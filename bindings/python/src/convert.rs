//! Conversions: JSON documents <-> Python objects, column values <->
//! NumPy arrays.
//!
//! dtypes: f64, i8..i64, u8..u64 and bool become the NumPy dtype of the
//! same name; c64/c128 become complex64/complex128; string columns become
//! arrays of dtype `object` holding Python `str` (exact: NumPy's fixed-width
//! `U` dtype would drop trailing NUL characters).

use molrec::model::ColumnData;
use molrec::DType;
use numpy::ndarray::{Array, IxDyn};
use numpy::prelude::*;
use numpy::{Complex32, Complex64, PyArray, PyArrayDyn, PyUntypedArray};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

/// A JSON value as plain Python objects (dict, list, str, int, float,
/// bool, None).
pub(crate) fn json_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => document_to_py(py, map)?.into_any(),
    })
}

/// A JSON object as a Python dict.
pub(crate) fn document_to_py<'py>(
    py: Python<'py>,
    map: &Map<String, Value>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (k, v) in map {
        dict.set_item(k, json_to_py(py, v)?)?;
    }
    Ok(dict)
}

/// A Python object as JSON: dict (str keys), list, tuple, str, int, float
/// (finite), bool, None, NumPy scalars and arrays (through `tolist`).
pub(crate) fn py_to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    py_to_json_at(obj, 0)
}

fn py_to_json_at(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > 256 {
        return Err(PyValueError::new_err("JSON nested more than 256 levels"));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(PyValueError::new_err(format!(
            "integer {obj} does not fit in 64 bits"
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let x = f.value();
        return serde_json::Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{x} is not a JSON number")));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = k
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err(format!("a JSON key must be a str, not {k:?}")))?
                .to_cow()?
                .into_owned();
            map.insert(key, py_to_json_at(&v, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for item in obj.try_iter()? {
            items.push(py_to_json_at(&item?, depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    // NumPy scalars and arrays (and anything else with `tolist`).
    if obj.hasattr("tolist")? {
        let plain = obj.call_method0("tolist")?;
        if !plain.is(obj) {
            return py_to_json_at(&plain, depth + 1);
        }
    }
    Err(PyTypeError::new_err(format!(
        "{} is not JSON (dict, list, str, int, float, bool or None)",
        obj.get_type().name()?
    )))
}

fn ndarray<'py, T: numpy::Element + Copy>(
    py: Python<'py>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    // A small array is copied into memory NumPy owns: one Python object
    // instead of two (an array over a Rust vector needs a capsule to free
    // it), which is most of what a single structure's arrays cost.
    if v.len() * std::mem::size_of::<T>() <= SMALL_ARRAY
        && shape.iter().product::<usize>() == v.len()
    {
        // SAFETY: a new C-contiguous array of `shape`, not yet shared with
        // any Python code; its elements (plain numbers or bools, `T: Copy`,
        // never objects) are all written by the copy below before it is
        // handed out.
        let array = unsafe { PyArray::<T, IxDyn>::new(py, IxDyn(shape), false) };
        // SAFETY: the array was just made C-contiguous and nothing else
        // holds a reference to its data.
        unsafe { array.as_slice_mut() }
            .map_err(|e| PyValueError::new_err(format!("shape {shape:?}: {e}")))?
            .copy_from_slice(&v);
        return Ok(array.into_any());
    }
    let array = Array::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| PyValueError::new_err(format!("shape {shape:?}: {e}")))?;
    Ok(PyArray::from_owned_array(py, array).into_any())
}

/// Bytes up to which an array is copied rather than handed over.
const SMALL_ARRAY: usize = 1 << 14;

/// Column values as a NumPy array of `shape` (whose product is the number
/// of values).
pub(crate) fn column_to_numpy<'py>(
    py: Python<'py>,
    data: ColumnData,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    match data {
        ColumnData::F64(v) => ndarray(py, v, shape),
        ColumnData::I8(v) => ndarray(py, v, shape),
        ColumnData::I16(v) => ndarray(py, v, shape),
        ColumnData::I32(v) => ndarray(py, v, shape),
        ColumnData::I64(v) => ndarray(py, v, shape),
        ColumnData::U8(v) => ndarray(py, v, shape),
        ColumnData::U16(v) => ndarray(py, v, shape),
        ColumnData::U32(v) => ndarray(py, v, shape),
        ColumnData::U64(v) => ndarray(py, v, shape),
        ColumnData::Bool(v) => ndarray(py, v, shape),
        ColumnData::C64(v) => ndarray(
            py,
            v.into_iter()
                .map(|[re, im]| Complex32::new(re, im))
                .collect(),
            shape,
        ),
        ColumnData::C128(v) => ndarray(
            py,
            v.into_iter()
                .map(|[re, im]| Complex64::new(re, im))
                .collect(),
            shape,
        ),
        ColumnData::String(v) => {
            // Columns of strings mostly repeat a few values (element
            // symbols, residue names): one Python object per distinct
            // value, shared (str is immutable).
            let mut made: std::collections::HashMap<&str, Py<PyAny>> =
                std::collections::HashMap::new();
            let objects: Vec<Py<PyAny>> = v
                .iter()
                .map(|s| {
                    made.entry(s.as_str())
                        .or_insert_with(|| PyString::new(py, s).into_any().unbind())
                        .clone_ref(py)
                })
                .collect();
            objects_to_numpy(py, objects, shape)
        }
    }
}

/// Python objects as a NumPy array of dtype `object` and `shape`.
pub(crate) fn objects_to_numpy<'py>(
    py: Python<'py>,
    objects: Vec<Py<PyAny>>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let array = Array::from_shape_vec(IxDyn(shape), objects)
        .map_err(|e| PyValueError::new_err(format!("shape {shape:?}: {e}")))?;
    Ok(PyArray::from_owned_object_array(py, array).into_any())
}

/// A 1-D array of `v`.
pub(crate) fn vec_to_numpy<'py, T: numpy::Element>(
    py: Python<'py>,
    v: Vec<T>,
) -> Bound<'py, PyAny> {
    PyArray::from_vec(py, v).into_any()
}

fn values<T: numpy::Element + Copy>(array: &Bound<'_, PyUntypedArray>) -> PyResult<Vec<T>> {
    let typed = array.cast::<PyArrayDyn<T>>()?;
    let ro = typed.readonly();
    Ok(match ro.as_slice() {
        Ok(slice) => slice.to_vec(),
        Err(_) => ro.as_array().iter().copied().collect(),
    })
}

/// An array-like (anything `numpy.asarray` takes) as column values and
/// its full shape. The dtype decides the column's: float64, the eight
/// integer dtypes, bool, complex64/complex128, and str (dtype object of
/// `str`, or NumPy's `U`) for string columns. `want` (a declared dtype)
/// converts what NumPy's default would get wrong for it: Python ints in
/// a list for a u64 column, `U` strings.
pub(crate) fn numpy_to_column(
    obj: &Bound<'_, PyAny>,
    want: Option<DType>,
) -> PyResult<(ColumnData, Vec<u64>)> {
    let py = obj.py();
    let np = py.import("numpy")?;
    let array = match want.and_then(numpy_name) {
        Some(name) if !obj.is_instance_of::<PyUntypedArray>() => {
            np.call_method1("asarray", (obj, name))?
        }
        _ => np.call_method1("asarray", (obj,))?,
    };
    let array = array.cast::<PyUntypedArray>()?;
    let shape: Vec<u64> = array.shape().iter().map(|&d| d as u64).collect();
    let dtype = array.dtype();
    let is = |d: Bound<'_, numpy::PyArrayDescr>| dtype.is_equiv_to(&d);
    let data = if is(numpy::dtype::<f64>(py)) {
        ColumnData::F64(values(array)?)
    } else if is(numpy::dtype::<i64>(py)) {
        ColumnData::I64(values(array)?)
    } else if is(numpy::dtype::<i32>(py)) {
        ColumnData::I32(values(array)?)
    } else if is(numpy::dtype::<u64>(py)) {
        ColumnData::U64(values(array)?)
    } else if is(numpy::dtype::<u32>(py)) {
        ColumnData::U32(values(array)?)
    } else if is(numpy::dtype::<bool>(py)) {
        ColumnData::Bool(values(array)?)
    } else if is(numpy::dtype::<i8>(py)) {
        ColumnData::I8(values(array)?)
    } else if is(numpy::dtype::<i16>(py)) {
        ColumnData::I16(values(array)?)
    } else if is(numpy::dtype::<u8>(py)) {
        ColumnData::U8(values(array)?)
    } else if is(numpy::dtype::<u16>(py)) {
        ColumnData::U16(values(array)?)
    } else if is(numpy::dtype::<Complex32>(py)) {
        let v: Vec<Complex32> = values(array)?;
        ColumnData::C64(v.into_iter().map(|c| [c.re, c.im]).collect())
    } else if is(numpy::dtype::<Complex64>(py)) {
        let v: Vec<Complex64> = values(array)?;
        ColumnData::C128(v.into_iter().map(|c| [c.re, c.im]).collect())
    } else {
        let kind = dtype.kind();
        if kind == b'O' || kind == b'U' {
            let flat = array.call_method0("ravel")?.call_method0("tolist")?;
            let mut out = Vec::new();
            for item in flat.try_iter()? {
                let item = item?;
                let s = item.cast::<PyString>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "a string column holds str, not {}",
                        item.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })?;
                out.push(s.to_cow()?.into_owned());
            }
            ColumnData::String(out)
        } else {
            return Err(PyTypeError::new_err(format!(
                "no molrec dtype for NumPy dtype {}",
                dtype.str()?
            )));
        }
    };
    Ok((data, shape))
}

/// NumPy's name of a dtype, for `numpy.asarray` of a non-array.
fn numpy_name(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::Bool => "bool",
        DType::C64 => "complex64",
        DType::C128 => "complex128",
        DType::String => "object",
    })
}

/// A 1-D bool array-like as a mask.
pub(crate) fn numpy_to_mask(obj: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
    match numpy_to_column(obj, Some(DType::Bool))? {
        (ColumnData::Bool(v), shape) if shape.len() == 1 => Ok(v),
        (_, shape) => Err(PyTypeError::new_err(format!(
            "a validity mask is a 1-D bool array, got shape {shape:?}"
        ))),
    }
}
