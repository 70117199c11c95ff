//! A policy's own errors ([`PolicyError`]): a kind the host maps to the WIT
//! `policy-error`, and a message for the tenant.

/// Why a policy call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidParameters,
    InvalidInput,
    Internal,
}

/// A policy's own error: a kind and a readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub kind: ErrorKind,
    pub message: String,
}

impl PolicyError {
    pub fn invalid_parameters(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::InvalidParameters, message: message.into() }
    }
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::InvalidInput, message: message.into() }
    }
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
