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

/// An uncompressed zip archive written entry by entry (names ASCII, each entry and the archive below
/// 4 GiB: no zip64), then `finish`ed with its central directory.
pub struct ZipWriter<W: Write> {
    w: W,
    central: Vec<u8>,
    offset: u64,
    entries: u16,
}

const DOS_TIME: u16 = 0; // 00:00:00
const DOS_DATE: u16 = 1 << 5 | 1; // 1980-01-01, zip's first day

fn too_big() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "zip entry or archive of 4 GiB or more (no zip64)",
    )
}

impl<W: Write> ZipWriter<W> {
    pub fn new(w: W) -> Self {
        ZipWriter {
            w,
            central: Vec::new(),
            offset: 0,
            entries: 0,
        }
    }

    /// One stored entry whose content is the concatenation of `parts`.
    pub fn entry(&mut self, name: &str, parts: &[&[u8]]) -> io::Result<()> {
        let size: u32 = parts
            .iter()
            .map(|p| p.len())
            .sum::<usize>()
            .try_into()
            .map_err(|_| too_big())?;
        let at: u32 = self.offset.try_into().map_err(|_| too_big())?;
        let mut crc = crc32fast::Hasher::new();
        for p in parts {
            crc.update(p);
        }
        let crc = crc.finalize();
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
        self.w.write_all(&local)?;
        for p in parts {
            self.w.write_all(p)?;
        }
        let c = &mut self.central;
        c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        for v in [20u16, 20, 0, 0, DOS_TIME, DOS_DATE] {
            c.extend_from_slice(&v.to_le_bytes()); // made by, needed, flags, method, time, date
        }
        for v in [crc, size, size] {
            c.extend_from_slice(&v.to_le_bytes());
        }
        for v in [name.len() as u16, 0, 0, 0, 0] {
            c.extend_from_slice(&v.to_le_bytes()); // name, extra, comment lengths, disk, internal attrs
        }
        c.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        c.extend_from_slice(&at.to_le_bytes());
        c.extend_from_slice(name.as_bytes());
        self.offset += local.len() as u64 + size as u64;
        self.entries = self.entries.checked_add(1).ok_or_else(too_big)?;
        Ok(())
    }

    /// Writes the central directory and the end record; returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        let at: u32 = self.offset.try_into().map_err(|_| too_big())?;
        self.w.write_all(&self.central)?;
        let mut end = Vec::with_capacity(22);
        end.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        for v in [0u16, 0, self.entries, self.entries] {
            end.extend_from_slice(&v.to_le_bytes()); // this disk, the directory's disk, entries here, entries
        }
        end.extend_from_slice(&(self.central.len() as u32).to_le_bytes());
        end.extend_from_slice(&at.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes()); // comment length
        self.w.write_all(&end)?;
        Ok(self.w)
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

    #[test]
    fn zip_lists_every_entry_and_ends_with_the_end_record() {
        let mut z = ZipWriter::new(Vec::new());
        z.entry("a.npy", &[b"x", b"yz"]).unwrap();
        z.entry("b.npy", &[]).unwrap();
        let out = z.finish().unwrap();
        let end = &out[out.len() - 22..];
        assert_eq!(&end[..4], &0x0605_4b50u32.to_le_bytes());
        assert_eq!(u16::from_le_bytes([end[10], end[11]]), 2);
        let crc = u32::from_le_bytes(out[14..18].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(b"xyz"));
    }
}
