#!/bin/sh
# The image's entrypoint: `services.<name>` runs that service (python -m), anything else runs as
# given (`longrun demo`, `longrun up`, a shell). A service refuses to start without the
# operator token, before it touches Redis, so a misconfigured deployment says why at once.
set -eu

case "${1:-}" in
  services.*)
    if [ -z "$(printf '%s' "${LONGRUN_OPERATOR_TOKEN:-}" | tr -d '[:space:]')" ]; then
      echo "longrun: LONGRUN_OPERATOR_TOKEN is not set: $1 refuses to start without it." \
        "Set it to a long random secret (for example \`openssl rand -hex 32\`), the same for" \
        "every service and the operator's CLI." >&2
      exit 78  # EX_CONFIG
    fi
    exec python -m "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
