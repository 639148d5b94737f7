"""`python -m services.scheduler` runs one scheduler process."""

from services.scheduler.app import main

main()
