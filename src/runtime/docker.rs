//! The Docker Engine adapter (bollard). Placeholder until the adapter lands.
