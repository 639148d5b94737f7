"""`python -m services.ledger` runs one ledger process."""

from services.ledger.app import main

main()
