"""One fake model server per test module, reset for each test (tools/fakemodel).

    shared, server = fake_server_fixtures(chunk_tokens=2)

at a module's top level gives it the two fixtures: `shared`, the module's server, and
`server`, the same server reset before each test and checked after it (a request the
server itself failed is a failed test)."""

from __future__ import annotations

import pytest

from everchat.tools.fakemodel import FakeModelServer


def fake_server_fixtures(**options):
    @pytest.fixture(scope="module", name="shared")
    def shared_fixture():
        with FakeModelServer(**options) as server:
            yield server

    @pytest.fixture(name="server")
    def server_fixture(shared):
        shared.reset()
        yield shared
        assert shared.errors == []

    return shared_fixture, server_fixture
