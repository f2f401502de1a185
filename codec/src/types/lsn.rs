//! WAL positions.

use core::fmt;
use core::str::FromStr;

use crate::{Decode, Encode, IntoOwned};

/// A WAL position (`XLogRecPtr`, uint64), shown as PostgreSQL prints it: `16/B374D848`.
///
/// ```
/// use pgoutput_codec::Lsn;
///
/// let lsn: Lsn = "16/B374D848".parse()?;
/// assert_eq!(lsn, Lsn(0x16_B374_D848));
/// assert_eq!(lsn.to_string(), "16/B374D848");
/// assert_eq!("0/0".parse::<Lsn>()?, Lsn::INVALID);
/// # Ok::<(), pgoutput_codec::LsnParseError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Decode, IntoOwned, Encode)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Lsn(pub u64);

impl Lsn {
    /// `InvalidXLogRecPtr`.
    pub const INVALID: Lsn = Lsn(0);

    /// Whether this is a real position (not 0).
    #[must_use]
    pub const fn is_valid(self) -> bool {
        self.0 != 0
    }
}

impl fmt::Display for Lsn {
    /// `%X/%X`: high and low 32 bits, upper-case hex, no padding.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 as u32)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

/// Why a string is not an LSN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LsnParseError {
    input: String,
}

impl fmt::Display for LsnParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid LSN {:?}: expected two hex numbers of up to 8 digits, like 16/B374D848",
            self.input
        )
    }
}

impl std::error::Error for LsnParseError {}

impl FromStr for Lsn {
    type Err = LsnParseError;

    /// Accepts any hex width of 1 to 8 digits per half, either case (PostgreSQL's `%X/%X`).
    fn from_str(s: &str) -> Result<Self, LsnParseError> {
        let half = |part: &str| {
            let hex =
                !part.is_empty() && part.len() <= 8 && part.bytes().all(|b| b.is_ascii_hexdigit());
            hex.then(|| u32::from_str_radix(part, 16).ok()).flatten()
        };
        let parsed = s
            .split_once('/')
            .and_then(|(hi, lo)| Some((half(hi)?, half(lo)?)));
        match parsed {
            Some((hi, lo)) => Ok(Lsn((u64::from(hi) << 32) | u64::from(lo))),
            None => Err(LsnParseError {
                input: s.to_owned(),
            }),
        }
    }
}

impl From<u64> for Lsn {
    fn from(v: u64) -> Self {
        Lsn(v)
    }
}

impl From<Lsn> for u64 {
    fn from(v: Lsn) -> Self {
        v.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_postgres() {
        assert_eq!(Lsn(0).to_string(), "0/0");
        assert_eq!(Lsn(0x14F_FE70).to_string(), "0/14FFE70");
        assert_eq!(Lsn(u64::MAX).to_string(), "FFFFFFFF/FFFFFFFF");
    }

    #[test]
    fn parses_any_width_and_round_trips() {
        assert_eq!(
            "0000016/0b374d848".parse::<Lsn>().ok(),
            None,
            "9 digits is too wide"
        );
        assert_eq!("16/b374d848".parse::<Lsn>(), Ok(Lsn(0x16_B374_D848)));
        assert_eq!("00000016/0B374D84".parse::<Lsn>(), Ok(Lsn(0x16_0B37_4D84)));
        for v in [0, 1, 0xFFFF_FFFF, 0x1_0000_0000, u64::MAX] {
            assert_eq!(Lsn(v).to_string().parse::<Lsn>(), Ok(Lsn(v)));
        }
        for bad in ["", "/", "1/", "/1", "1", "1/2/3", "g/1", "+1/1", "1 /1"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad:?}");
        }
    }
}
