//! The column groups a policy declares it reads ([`InputGroups`]): the host fills only
//! those (the WIT `input-groups` flags).

/// Column groups a policy reads; the host fills only these (see the WIT `input-groups`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct InputGroups(u8);

impl InputGroups {
    /// No group: only worker ids and dp ranks travel.
    pub const NONE: Self = Self(0);
    /// Overlap blocks on device/host/disk, cached tokens.
    pub const CACHE: Self = Self(1);
    /// Prefill tokens in flight, decode blocks, requests in flight.
    pub const LOAD: Self = Self(2);
    /// The preferred-taint multiplier.
    pub const AFFINITY: Self = Self(4);
    /// Every group.
    pub const ALL: Self = Self(7);

    /// Both sets of groups.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
    /// Whether every group of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
    /// The WIT flags' bit pattern.
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// From the bit pattern of the WIT flags; unknown bits are dropped.
    pub const fn from_bits_truncate(bits: u8) -> Self {
        Self(bits & Self::ALL.0)
    }
}

impl std::ops::BitOr for InputGroups {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}
