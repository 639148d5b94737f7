"""The wire contract: message catalogue, envelope and codec, and every stream and key name."""
