//! numpy arrays (`.npy`, format 1.0) in an uncompressed zip archive (`.npz`),
//! as `numpy.savez` writes them and `numpy.load` reads them.
//!
//! The formats: numpy's `numpy/lib/format.py` (a magic string, a version, a
//! little-endian u16 header length, a Python-literal header padded to a
//! multiple of 64 bytes, then the raw values) and PKWARE's APPNOTE.TXT for the
//! zip container (stored entries: local headers, central directory, end record;
//! every entry with its CRC-32, which Python's zipfile checks on reading).

use std::io::{self, Write};

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

    fn values_le(&self, out: &mut Vec<u8>) {
        macro_rules! le {
            ($v:expr) => {
                for x in $v {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            };
        }
        match self {
            Column::U8(v) => out.extend_from_slice(v),
            Column::U16(v) => le!(v),
            Column::I16(v) => le!(v),
            Column::U32(v) => le!(v),
            Column::I32(v) => le!(v),
            Column::I64(v) => le!(v),
            Column::F32(v) => le!(v),
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

/// The `.npy` file of `column`.
pub fn npy(column: &Column) -> Vec<u8> {
    let mut out = npy_header(column.descr(), column.len());
    column.values_le(&mut out);
    out
}

/// The `.npy` file of `bytes` as a uint8 array (how the cache stores its JSON header).
pub fn npy_bytes(bytes: &[u8]) -> Vec<u8> {
    npy(&Column::U8(bytes.to_vec()))
}

/// Writes an uncompressed zip archive of `(name, content)` entries (names
/// ASCII, each entry and the archive below 4 GiB: no zip64).
pub fn write_zip(w: &mut impl Write, entries: &[(String, Vec<u8>)]) -> io::Result<()> {
    const DOS_TIME: u16 = 0; // 00:00:00
    const DOS_DATE: u16 = (1980 - 1980) << 9 | 1 << 5 | 1; // 1980-01-01, zip's first day
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "zip entry or archive of 4 GiB or more (no zip64)");
    let mut central = Vec::new();
    let mut offset: u64 = 0;
    for (name, data) in entries {
        let size: u32 = data.len().try_into().map_err(|_| too_big())?;
        let at: u32 = offset.try_into().map_err(|_| too_big())?;
        let crc = crc32fast::hash(data);
        let mut local = Vec::with_capacity(30 + name.len());
        local.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        for v in [20u16, 0, 0, DOS_TIME, DOS_DATE] {
            local.extend_from_slice(&v.to_le_bytes()); // version needed, flags, method (stored), time, date
        }
        for v in [crc, size, size] {
            local.extend_from_slice(&v.to_le_bytes());
        }
        local.extend_from_slice(&(name.len() as u16).to_le_bytes());
        local.extend_from_slice(&0u16.to_le_bytes());
        local.extend_from_slice(name.as_bytes());
        w.write_all(&local)?;
        w.write_all(data)?;
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        for v in [20u16, 20, 0, 0, DOS_TIME, DOS_DATE] {
            central.extend_from_slice(&v.to_le_bytes()); // made by, needed, flags, method, time, date
        }
        for v in [crc, size, size] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        for v in [name.len() as u16, 0, 0, 0, 0] {
            central.extend_from_slice(&v.to_le_bytes()); // name, extra, comment lengths, disk, internal attrs
        }
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&at.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
        offset += local.len() as u64 + data.len() as u64;
    }
    let at: u32 = offset.try_into().map_err(|_| too_big())?;
    w.write_all(&central)?;
    let mut end = Vec::with_capacity(22);
    end.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    let n = entries.len() as u16;
    for v in [0u16, 0, n, n] {
        end.extend_from_slice(&v.to_le_bytes()); // this disk, the directory's disk, entries here, entries
    }
    end.extend_from_slice(&(central.len() as u32).to_le_bytes());
    end.extend_from_slice(&at.to_le_bytes());
    end.extend_from_slice(&0u16.to_le_bytes()); // comment length
    w.write_all(&end)
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
        assert_eq!(Column::compact_gappy(2, f32::NAN, |i| [Some(3), Some(4)][i]).descr(), "|u1");
        assert_eq!(Column::compact_gappy(2, f32::NAN, |i| [Some(3), None][i]).descr(), "<f4");
    }

    #[test]
    fn npy_header_is_padded_to_64_bytes() {
        let b = npy(&Column::U16(vec![1, 2, 3]));
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert_eq!(b[10 + hlen - 1], b'\n');
        assert!(std::str::from_utf8(&b[10..10 + hlen]).unwrap().starts_with("{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }"));
        assert_eq!(&b[10 + hlen..], &[1, 0, 2, 0, 3, 0]);
    }

    #[test]
    fn zip_lists_every_entry_and_ends_with_the_end_record() {
        let mut out = Vec::new();
        write_zip(&mut out, &[("a.npy".into(), b"xyz".to_vec()), ("b.npy".into(), vec![])]).unwrap();
        let end = &out[out.len() - 22..];
        assert_eq!(&end[..4], &0x0605_4b50u32.to_le_bytes());
        assert_eq!(u16::from_le_bytes([end[10], end[11]]), 2);
        let crc = u32::from_le_bytes(out[14..18].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(b"xyz"));
    }
}
