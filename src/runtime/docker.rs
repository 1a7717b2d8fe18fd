//! The Docker Engine adapter (bollard). Placeholder until the adapter lands.

use super::{Engine, Inventory, Kind, Removal, RuntimeError};

/// A connection to one Docker Engine.
pub struct DockerRuntime;

impl DockerRuntime {
    /// Connects to the engine at `endpoint`.
    ///
    /// # Errors
    /// Always, until the adapter lands.
    #[expect(clippy::unused_async, reason = "placeholder until the adapter lands")]
    pub async fn connect(endpoint: &str) -> Result<Self, RuntimeError> {
        Err(RuntimeError::Unreachable {
            runtime: "docker",
            endpoint: endpoint.to_owned(),
            hint: "is dockerd running, and is the socket path right?",
            source: "not implemented".into(),
        })
    }
}

impl Engine for DockerRuntime {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn inventory(&self) -> Result<Inventory, RuntimeError> {
        Ok(Inventory::default())
    }

    async fn recheck(&self, _kind: Kind, _id: &str) -> Result<Inventory, RuntimeError> {
        Ok(Inventory::default())
    }

    async fn remove(&self, _kind: Kind, _id: &str) -> Removal {
        Removal::Failed("not implemented".to_owned())
    }
}
