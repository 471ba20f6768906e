import pytest

pytestmark = pytest.mark.spark
