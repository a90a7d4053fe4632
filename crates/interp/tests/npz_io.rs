//! npz arguments: every element type reads back what was written, a
//! Fortran-ordered array (NumPy writes one for a transposed array) reads as
//! the array it holds, and a member whose data is shorter than its header
//! promises is an error naming it.

use npyz::WriterBuilder;
use tpusim_hlo::{PrimitiveType as T, Shape};
use tpusim_interp::{npz, Array, Data, Value};

fn shape(ty: T, dims: &[i64]) -> Shape {
    Shape::array(ty, dims.to_vec())
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tpusim-npz-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// One array of each element family, written as results and read back as
/// arguments: the same values.
#[test]
fn every_element_type_round_trips() {
    let arrays = vec![
        Array::from_f64s(T::F32, vec![2, 3], &[0.5, -1.0, 3.25, 1e30, -0.0, 7.0]),
        Array::from_f64s(T::F64, vec![3], &[1e300, -2.5, 0.1]),
        Array::from_f64s(T::Bf16, vec![2], &[1.5, -3.0]),
        Array::from_f64s(T::F16, vec![2], &[0.25, 65504.0]),
        Array::from_i64s(T::S32, vec![3], &[-7, 2147483647, -2147483648]),
        Array::from_i64s(T::S64, vec![2], &[i64::MIN, 5]),
        Array::from_i64s(T::S8, vec![2], &[-128, 127]),
        Array::from_i64s(T::S4, vec![2], &[-8, 7]),
        Array::from_i64s(T::U8, vec![2], &[0, 255]),
        Array::from_i64s(T::U16, vec![2], &[0, 65535]),
        Array::from_i64s(T::U32, vec![2], &[0, 4294967295]),
        Array::from_i64s(T::Pred, vec![3], &[1, 0, 1]),
        Array::new(T::C64, vec![2], Data::C64(vec![(1.0, -2.0), (0.5, 3.0)])),
    ];
    let values: Vec<Value> = arrays.iter().cloned().map(Value::Array).collect();
    let path = tmp("round_trip.npz");
    npz::write_outputs(&path, &values).expect("writes");
    let shapes: Vec<Shape> = arrays
        .iter()
        .map(|a| {
            let dims: Vec<i64> = a.dims.iter().map(|&d| d as i64).collect();
            shape(a.ty, &dims)
        })
        .collect();
    let read = npz::read_named(&path, "out", &shapes).expect("reads");
    assert_eq!(read, values);
}

/// A 2x3 array stored in Fortran order (its elements column by column) is
/// the 2x3 array, not its storage order reshaped.
#[test]
fn a_fortran_ordered_array_reads_as_the_array_it_holds() {
    let path = tmp("fortran.npz");
    let file = std::fs::File::create(&path).expect("creates");
    let mut w = npyz::npz::NpzWriter::new(std::io::BufWriter::new(file));
    // The array [[0, 1, 2], [3, 4, 5]], stored column-major.
    let mut a = w
        .array::<f32>("arg0", Default::default())
        .expect("member")
        .default_dtype()
        .shape(&[2, 3])
        .order(npyz::Order::Fortran)
        .begin_nd()
        .expect("header");
    a.extend([0.0f32, 3.0, 1.0, 4.0, 2.0, 5.0]).expect("data");
    a.finish().expect("finish");
    w.zip_writer().finish().expect("zip");
    let read = npz::read_named(&path, "arg", &[shape(T::F32, &[2, 3])]).expect("reads");
    let Value::Array(x) = &read[0] else {
        panic!("an array")
    };
    assert_eq!(x.dims, vec![2, 3]);
    assert_eq!(x.to_f64s(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
}

/// A member cut short is an error naming the member, never a short array.
#[test]
fn a_member_shorter_than_its_header_is_an_error() {
    let path = tmp("short.npz");
    let file = std::fs::File::create(&path).expect("creates");
    let mut zip = zip::ZipWriter::new(file);
    zip.start_file("arg0.npy", zip::write::FileOptions::default())
        .expect("member");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    npy.extend((padded.len() as u16).to_le_bytes());
    npy.extend(padded.as_bytes());
    npy.extend(1.0f32.to_le_bytes()); // one element of the four promised
    std::io::Write::write_all(&mut zip, &npy).expect("data");
    zip.finish().expect("zip");
    let err = npz::read_named(&path, "arg", &[shape(T::F32, &[4])]).expect_err("short data");
    let msg = err.to_string();
    assert!(msg.contains("arg0") && msg.contains("promises 16"), "{msg}");
}
