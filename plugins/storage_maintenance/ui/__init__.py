"""The web UI inside Airflow's api-server: :mod:`.app` (the FastAPI app the plugin registers), :mod:`.web` (what
every page shares), the Storage view's pages (:mod:`.storage_view`), the console's (:mod:`.console`) and its
actions on the store (:mod:`.actions`), and the Jinja templates (``templates/``)."""
