"""`python -m services.ingress` runs one ingress process (HTTP API and callbacks consumer)."""

from services.ingress.app import main

main()
