"""Redis adapters shared by the services: client factory, the Functions library, the read model."""
