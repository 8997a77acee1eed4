from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType

from blis_core.runner.engine_component import _copied


def test_copied_scrape_is_a_fresh_dict_in_the_same_order() -> None:
    samples = {"b": 2.0, "a": 1.0, "c:le=+Inf": 3.0}
    for view in (
        MappingProxyType(samples),
        samples,
        MappingProxyType(OrderedDict(samples)),
    ):
        copy = _copied(view)
        assert type(copy) is dict
        assert copy is not samples
        assert list(copy.items()) == list(dict(view).items())
    copy = _copied(MappingProxyType(samples))
    samples["a"] = 9.0
    assert copy["a"] == 1.0
