"""Access control lists with the semantics of Kafka's ``StandardAuthorizer``: the model (:mod:`.model`), the
crash-safe store kept beside the log dirs (:mod:`.store`) and the decision (:mod:`.authorizer`). The broker asks
it through :mod:`storage_engine.server.access`; the console reads the store. Nothing here imports the server."""
