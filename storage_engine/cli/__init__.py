"""The command line (``python -m storage_engine``): the entry point (:mod:`.main`), its arguments and output
(:mod:`.args`), the data commands (:mod:`.data_commands`) and the inspection, maintenance and lifecycle commands
(:mod:`.admin_commands`). Every command hands off to :mod:`storage_engine.jobs` or :mod:`storage_engine.inspection`.
"""
