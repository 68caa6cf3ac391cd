//! numpy arrays (`.npy`, format 1.0) in an uncompressed zip archive (`.npz`),
//! as `numpy.savez` writes them and `numpy.load` reads them.
//!
//! The `.npy` format is numpy's `numpy/lib/format.py` (a magic string, a
//! version, a little-endian u16 header length, a Python-literal header padded
//! to a multiple of 64 bytes, then the raw values), written here; the zip
//! container (PKWARE's APPNOTE.TXT: stored entries, each with the CRC-32 that
//! Python's zipfile checks on reading) is the `zip` crate's.

use std::io::{self, Seek, Write};

/// A one-dimensional array in one of the dtypes the cache uses.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    U8(Vec<u8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
}

impl Column {
    /// `n` whole numbers `get(0..n)` in the narrowest of uint8, uint16, int16,
    /// uint32, int32 that holds their range, else int64: the choice of
    /// `transient.series.compact`.
    pub fn compact_ints(n: usize, get: impl Fn(usize) -> i64) -> Column {
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for i in 0..n {
            let v = get(i);
            lo = lo.min(v);
            hi = hi.max(v);
        }
        let within = |min: i64, max: i64| n == 0 || (min <= lo && hi <= max);
        if within(0, u8::MAX as i64) {
            Column::U8((0..n).map(|i| get(i) as u8).collect())
        } else if within(0, u16::MAX as i64) {
            Column::U16((0..n).map(|i| get(i) as u16).collect())
        } else if within(i16::MIN as i64, i16::MAX as i64) {
            Column::I16((0..n).map(|i| get(i) as i16).collect())
        } else if within(0, u32::MAX as i64) {
            Column::U32((0..n).map(|i| get(i) as u32).collect())
        } else if within(i32::MIN as i64, i32::MAX as i64) {
            Column::I32((0..n).map(|i| get(i) as i32).collect())
        } else {
            Column::I64((0..n).map(get).collect())
        }
    }

    /// `values` as `compact_ints` makes them (one pass for the range, one to convert; both vectorized).
    pub fn compact_u32(values: &[u32]) -> Column {
        let hi = values.iter().copied().max().unwrap_or(0);
        if hi <= u8::MAX as u32 {
            Column::U8(values.iter().map(|&x| x as u8).collect())
        } else if hi <= u16::MAX as u32 {
            Column::U16(values.iter().map(|&x| x as u16).collect())
        } else {
            Column::U32(values.to_vec())
        }
    }

    /// `n` whole numbers below 2**24 in magnitude, `None` where a position
    /// has none: float32 with `gap` there when there is a gap, else as
    /// `compact_ints` (the choice of `transient.series.compact` for a float
    /// array with NaN or inf).
    pub fn compact_gappy(n: usize, gap: f32, get: impl Fn(usize) -> Option<i64>) -> Column {
        if (0..n).all(|i| get(i).is_some()) {
            return Column::compact_ints(n, |i| get(i).expect("no gap"));
        }
        Column::F32((0..n).map(|i| get(i).map_or(gap, |v| v as f32)).collect())
    }

    /// numpy's dtype string (`descr`), e.g. "<u2".
    pub fn descr(&self) -> &'static str {
        match self {
            Column::U8(_) => "|u1",
            Column::U16(_) => "<u2",
            Column::I16(_) => "<i2",
            Column::U32(_) => "<u4",
            Column::I32(_) => "<i4",
            Column::I64(_) => "<i8",
            Column::F32(_) => "<f4",
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Column::U8(v) => v.len(),
            Column::U16(v) => v.len(),
            Column::I16(v) => v.len(),
            Column::U32(v) => v.len(),
            Column::I32(v) => v.len(),
            Column::I64(v) => v.len(),
            Column::F32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values' bytes, little-endian as numpy's dtype says (the memory itself on a little-endian
    /// machine: no copy).
    pub fn le_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        macro_rules! view {
            ($v:expr) => {{
                #[cfg(target_endian = "little")]
                {
                    // SAFETY: plain integers and floats, no padding; the slice lives as long as `self`
                    std::borrow::Cow::Borrowed(unsafe {
                        std::slice::from_raw_parts($v.as_ptr() as *const u8, std::mem::size_of_val($v.as_slice()))
                    })
                }
                #[cfg(not(target_endian = "little"))]
                {
                    std::borrow::Cow::Owned($v.iter().flat_map(|x| x.to_le_bytes()).collect())
                }
            }};
        }
        match self {
            Column::U8(v) => std::borrow::Cow::Borrowed(v.as_slice()),
            Column::U16(v) => view!(v),
            Column::I16(v) => view!(v),
            Column::U32(v) => view!(v),
            Column::I32(v) => view!(v),
            Column::I64(v) => view!(v),
            Column::F32(v) => view!(v),
        }
    }
}

/// The `.npy` bytes of a one-dimensional array of `len` values of dtype
/// `descr` whose little-endian bytes follow.
fn npy_header(descr: &str, len: usize) -> Vec<u8> {
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({len},), }}");
    let unpadded = 10 + dict.len() + 1; // magic, version, length; the dict; its newline
    let total = unpadded.div_ceil(64) * 64;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&((total - 10) as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out
}

/// The `.npy` header of `column` (its values' bytes, `Column::le_bytes`, follow it in the file).
pub fn npy_header_of(column: &Column) -> Vec<u8> {
    npy_header(column.descr(), column.len())
}

/// The whole `.npy` file of `column`.
pub fn npy(column: &Column) -> Vec<u8> {
    let mut out = npy_header_of(column);
    out.extend_from_slice(&column.le_bytes());
    out
}

/// An `.npz` archive written array by array: numpy's uncompressed archive (`numpy.savez`), each array a
/// stored (uncompressed) zip entry `NAME.npy`, then `finish`ed with its central directory.
///
/// The zip container is the `zip` crate's. Entries are stored and carry no data descriptor (the writer
/// seeks back to put each entry's CRC-32 and size into its local header), so a reader may map the
/// file and find an array's bytes from the local header alone, as `transient.cache` does. Every entry
/// has one fixed modification time (the earliest a zip header can hold, its DOS-date epoch) so the
/// same arrays make the same bytes. Each entry's data starts at a multiple of [`ALIGN`] bytes from
/// the archive's start (padding in the local header's extra field, APPNOTE's 0xa11e record); with
/// `.npy` headers padded to that same multiple, an array viewed in place in a mapped archive is
/// aligned for its dtype. An entry of 4 GiB or more is an error; an archive past 4 GiB gets zip64
/// records.
pub struct NpzWriter<W: Write + Seek> {
    zip: zip::ZipWriter<W>,
}

/// Where each entry's data starts: a multiple of this many bytes, numpy's own `.npy` header alignment
/// (`numpy.lib.format.ARRAY_ALIGN`).
pub const ALIGN: u16 = 64;

impl<W: Write + Seek> NpzWriter<W> {
    pub fn new(w: W) -> Self {
        NpzWriter {
            zip: zip::ZipWriter::new(w),
        }
    }

    /// Writes `column` as the entry `NAME.npy`. Errors: the writer's, or an entry of 4 GiB or more.
    pub fn array(&mut self, name: &str, column: &Column) -> io::Result<()> {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default())
            .with_alignment(ALIGN);
        self.zip.start_file(format!("{name}.npy"), options)?;
        self.zip.write_all(&npy_header_of(column))?;
        self.zip.write_all(&column.le_bytes())?;
        Ok(())
    }

    /// Writes the central directory and the end record; returns the writer.
    pub fn finish(self) -> io::Result<W> {
        Ok(self.zip.finish()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chooses_the_narrowest_dtype_as_compact() {
        assert_eq!(Column::compact_ints(2, |i| [0, 255][i]).descr(), "|u1");
        assert_eq!(Column::compact_ints(2, |i| [0, 256][i]).descr(), "<u2");
        assert_eq!(Column::compact_ints(2, |i| [-1, 5][i]).descr(), "<i2");
        assert_eq!(Column::compact_ints(2, |i| [-1, 40000][i]).descr(), "<i4");
        assert_eq!(Column::compact_ints(2, |i| [0, 70000][i]).descr(), "<u4");
        assert_eq!(Column::compact_ints(2, |i| [-1, 1 << 32][i]).descr(), "<i8");
        assert_eq!(
            Column::compact_gappy(2, f32::NAN, |i| [Some(3), Some(4)][i]).descr(),
            "|u1"
        );
        for top in [0u32, 255, 256, 65535, 65536, u32::MAX] {
            assert_eq!(
                Column::compact_u32(&[0, top]),
                Column::compact_ints(2, |i| [0, top as i64][i])
            );
        }
        assert_eq!(Column::compact_u32(&[]), Column::compact_ints(0, |_| 0));
        assert_eq!(
            Column::compact_gappy(2, f32::NAN, |i| [Some(3), None][i]).descr(),
            "<f4"
        );
    }

    #[test]
    fn npy_header_is_padded_to_64_bytes() {
        let b = npy(&Column::U16(vec![1, 2, 3]));
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert_eq!(b[10 + hlen - 1], b'\n');
        assert!(std::str::from_utf8(&b[10..10 + hlen])
            .unwrap()
            .starts_with("{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }"));
        assert_eq!(&b[10 + hlen..], &[1, 0, 2, 0, 3, 0]);
    }

    fn archive(columns: &[(&str, Column)]) -> Vec<u8> {
        let mut npz = NpzWriter::new(io::Cursor::new(Vec::new()));
        for (name, col) in columns {
            npz.array(name, col).unwrap();
        }
        npz.finish().unwrap().into_inner()
    }

    fn le16(b: &[u8], at: usize) -> usize {
        u16::from_le_bytes([b[at], b[at + 1]]) as usize
    }

    fn le32(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn entries_are_stored_aligned_and_found_from_their_local_headers() {
        let columns = [
            ("a", Column::U8(vec![7; 3])),
            ("b", Column::U32(vec![1, 2, 70000])),
            ("empty", Column::I64(vec![])),
            ("c", Column::F32(vec![0.5, f32::NAN])),
        ];
        let out = archive(&columns);
        let mut zip = zip::ZipArchive::new(io::Cursor::new(&out)).unwrap();
        assert_eq!(zip.len(), columns.len());
        for (i, (name, col)) in columns.iter().enumerate() {
            let entry = zip.by_index(i).unwrap();
            assert_eq!(entry.name(), format!("{name}.npy"));
            assert_eq!(entry.compression(), zip::CompressionMethod::Stored);
            let want = npy(col);
            // as transient.cache reads it: the local header at the central directory's offset, its
            // sizes and CRC-32 filled in (no data descriptor), the data after its name and extra field
            let at = entry.header_start() as usize;
            assert_eq!(le32(&out, at), 0x0403_4b50);
            assert_eq!(le16(&out, at + 6) & 0x08, 0, "{name}: a data descriptor");
            assert_eq!(le16(&out, at + 8), 0, "{name}: not stored");
            assert_eq!(le32(&out, at + 14), crc32fast::hash(&want));
            assert_eq!(le32(&out, at + 18) as usize, want.len());
            assert_eq!(le32(&out, at + 22) as usize, want.len());
            let start = at + 30 + le16(&out, at + 26) + le16(&out, at + 28);
            assert_eq!(start as u64, entry.data_start().unwrap());
            assert_eq!(start % ALIGN as usize, 0, "{name}: data at {start}");
            assert_eq!(&out[start..start + want.len()], &want[..]);
        }
        // no zip64 end records for a small archive: the end record alone, at the very end
        assert_eq!(le32(&out, out.len() - 22), 0x0605_4b50);
        assert_eq!(le16(&out, out.len() - 22 + 10), columns.len());
        assert!(!out.windows(4).any(|w| w == 0x0606_4b50u32.to_le_bytes()));
    }

    #[test]
    fn the_same_arrays_make_the_same_bytes() {
        let columns = [
            ("x", Column::U16(vec![1, 2, 3])),
            ("meta", Column::U8(b"{}".to_vec())),
        ];
        let first = archive(&columns);
        assert_eq!(archive(&columns), first);
        // not the clock's time: the DOS-date epoch in every local header
        let mut zip = zip::ZipArchive::new(io::Cursor::new(&first)).unwrap();
        for i in 0..zip.len() {
            let at = zip.by_index(i).unwrap().header_start() as usize;
            assert_eq!(
                (le16(&first, at + 10), le16(&first, at + 12)),
                (0, 1 << 5 | 1)
            );
        }
    }
}
