"""Every segment test runs twice: with the compiled recovery walk and with the Python loop alone."""
from tests.storage_engine.kernels import kernels_fixture

kernels = kernels_fixture()
