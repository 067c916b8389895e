"""Typed registries: every kind's builders share one call shape (a protocol in tandem.registry), and a builder of
another shape is refused when it registers, naming the shape its kind is called with."""

import inspect

import pytest

from tandem.errors import ConfigError
from tandem.registry import ALL, BUILDER_TYPES, Registry


def test_every_registered_builder_fits_its_kind():
    for registry in ALL.values():
        protocol = BUILDER_TYPES[registry.kind]
        wanted = [p for p in inspect.signature(protocol.__call__).parameters.values() if p.name != "self"]
        for entry in registry.entries():
            sig = inspect.signature(entry.build)
            args = [object()] * sum(p.default is inspect.Parameter.empty for p in wanted)
            sig.bind(*args)  # callable the way the registry calls it
            assert entry.kind == registry.kind


def test_a_builder_of_another_shape_is_refused_at_registration():
    methods = Registry("method")
    with pytest.raises(ConfigError, match=r"method 'toy': its builder .* takes \(llm\); a method builder is "
                                          r"called with \(parts, settings\)"):
        methods.register("toy")(lambda llm: None)
    retrievers = Registry("retriever")
    with pytest.raises(ConfigError, match="a retriever builder is called with \\(index, settings\\)"):
        retrievers.register("toy")(lambda index, settings, extra: None)
    methods.register("fine")(lambda parts, settings: None)  # the right shape registers
    assert methods.names() == ["fine"]
