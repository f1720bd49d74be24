"""docker-compose.yaml's deployment run as processes on one machine (``make cluster``); see :mod:`.run`."""
