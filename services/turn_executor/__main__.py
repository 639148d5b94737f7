"""`python -m services.turn_executor` runs one turn-executor process."""

from services.turn_executor.app import main

main()
