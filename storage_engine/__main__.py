"""``python -m storage_engine``: the command line (storage_engine/cli), the broker's ``serve`` among its commands.

kio (the Kafka protocol's schema types the broker's handlers use) imports hypothesis when it is installed, only to
register test-data strategies for its types; a broker never generates test data, and that import is about half of
the broker's start-up CPU (~0.2 s of ~0.4 s for the protocol's modules). The command line is its own process, so it
marks hypothesis as absent before anything imports kio (kio then skips the registration, as it does where hypothesis
is not installed); code that imports the engine as a library, a test process say, is not affected.
"""
import sys

sys.modules.setdefault("hypothesis", None)   # type: ignore[arg-type]  # None in sys.modules: "not installed"

from storage_engine.cli.main import main  # noqa: E402 - after the line above, so kio never imports hypothesis

sys.exit(main())
