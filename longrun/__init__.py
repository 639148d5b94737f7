"""longrun's Python client (`longrun.client`), installable alone with `pip install
'longrun[client]'` (httpx and pydantic only): the services themselves live in `services` and
`shared`, which the client never imports."""
