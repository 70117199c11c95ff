//! What the fuzz targets share: structure-aware request generation ([`request`]), and the
//! split between raw and structured inputs every target makes.

pub mod api;
pub mod params;
pub mod request;
pub mod smith;

use arbitrary::Unstructured;

/// The request limits every target runs under: the service's defaults.
pub use switchyard::selection::wire::RequestLimits;

/// A target's input is JSON text when it starts with `{` (the committed seeds are real
/// requests, which libFuzzer mutates as bytes), else bytes `arbitrary` builds a request
/// from: `Err` carries the [`Unstructured`] to build from.
pub fn json_or_structured(data: &[u8]) -> Result<Option<&str>, Unstructured<'_>> {
    if data.first() == Some(&b'{') {
        Ok(std::str::from_utf8(data).ok())
    } else {
        Err(Unstructured::new(data))
    }
}
