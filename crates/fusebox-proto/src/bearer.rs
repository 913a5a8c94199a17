//! A bearer token on every call a client makes (`authorization: Bearer
//! fbx_...`), for the CLI and the SDK alike.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Adds the caller's token, if it has one, to every request.
#[derive(Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = if self.0.is_some() { "<token>" } else { "none" };
        write!(f, "Bearer({shown})")
    }
}

impl Bearer {
    /// No token: calls go out as the anonymous caller.
    pub fn none() -> Bearer {
        Bearer(None)
    }

    /// A token, checked to be one header value (printable ASCII).
    pub fn token(token: &str) -> Result<Bearer, String> {
        let token = token.trim();
        if token.is_empty() {
            return Err("the token is empty".into());
        }
        let mut value: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| "the token holds characters a header cannot carry".to_owned())?;
        value.set_sensitive(true);
        Ok(Bearer(Some(value)))
    }

    /// Puts the token, if any, on one request.
    pub fn attach<T>(&self, request: &mut Request<T>) {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        self.attach(&mut request);
        Ok(request)
    }
}
