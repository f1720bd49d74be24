"""Every compaction test runs twice: with the compiled record filter and key map kernels, and with their
pure-Python twins."""
from tests.storage_engine.kernels import kernels_fixture

kernels = kernels_fixture()
