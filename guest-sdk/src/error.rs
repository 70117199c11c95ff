//! A policy's own errors ([`PolicyError`]): a kind the host maps to the WIT
//! `policy-error`, and a message for the tenant.

/// Why a policy call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The tenant's parameters are not acceptable.
    InvalidParameters,
    /// The request lacks what the policy needs.
    InvalidInput,
    /// The policy failed on its own account.
    Internal,
}

/// A policy's own error: a kind and a readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// What kind of failure (the WIT `error-kind`).
    pub kind: ErrorKind,
    /// What went wrong, for the tenant; the host cuts it to 1 KiB.
    pub message: String,
}

impl PolicyError {
    /// `configure` refuses the parameters (use [`crate::check`] for ranges).
    pub fn invalid_parameters(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::InvalidParameters, message: message.into() }
    }
    /// The request cannot be scored by this policy (a fact it needs is missing).
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::InvalidInput, message: message.into() }
    }
    /// A bug or a broken invariant of the policy itself.
    pub fn internal(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Internal, message: message.into() }
    }
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            ErrorKind::InvalidParameters => "invalid parameters",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Internal => "internal error",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for PolicyError {}
