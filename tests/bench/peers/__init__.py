"""The peers measured side by side with longrun (tests/bench/test_bench_peers.py): a Celery app
and a Taskiq broker, each with the same handler shape (record the event, publish a follow-up),
imported by their own worker processes."""
