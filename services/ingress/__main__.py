"""`python -m services.ingress` runs the ingress: one process (HTTP API and callbacks consumer),
or with LONGRUN_INGRESS_WORKERS above 1 a supervisor of that many, which never imports the app
itself (`services.ingress.workers`)."""

from services.ingress.settings import IngressSettings

if IngressSettings().ingress_workers > 1:
    from services.ingress.workers import serve_workers

    serve_workers(IngressSettings())
else:
    from services.ingress.app import main

    main()
