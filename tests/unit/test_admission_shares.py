"""The arithmetic of ``transport.admission.Admission``: the places of a process
shared fairly among client addresses until a token vouches for a connection.
The live server's side is tests/integration/test_admission.py."""

from __future__ import annotations

import asyncio

from runstate.transport.admission import Admission, Trusted

BUDGET = 100


class Conn(asyncio.Transport):
    """A transport that only notes being aborted."""

    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def admission(per_address: int = 256, trusted: tuple[str, ...] = ()) -> Admission:
    admitted = Admission(
        per_address=per_address, header_seconds=1, body_seconds=1, trusted=Trusted(trusted)
    )
    admitted.budget = BUDGET
    return admitted


def open_from(admitted: Admission, address: str, n: int) -> list[Conn]:
    """``n`` connections from ``address``, each admitted."""
    conns = [Conn() for _ in range(n)]
    for conn in conns:
        assert admitted.admit(conn, address)
    return conns


def held(conns: list[Conn]) -> int:
    return sum(not conn.aborted for conn in conns)


def test_fifty_addresses_together_hold_the_budget_and_no_more() -> None:
    """Guards the fair share: fifty addresses opening 30 connections each hold the
    process's 100 places, two each (100 / 50), whatever order they came in; the
    ones closed to make room were each address's oldest."""
    admitted = admission()
    conns = {n: open_from(admitted, f"10.0.0.{n}", 30) for n in range(50)}
    assert admitted.open == BUDGET
    assert [held(c) for c in conns.values()] == [2] * 50
    assert all(c[-1].aborted is False and c[-2].aborted is False for c in conns.values())


def test_a_newcomer_always_has_room() -> None:
    """Guards room for a newcomer: with one address holding all 100 places, a
    connection from another address is admitted, and the first address's oldest
    connection is closed for it."""
    admitted = admission()
    crowd = open_from(admitted, "10.0.0.1", BUDGET)
    newcomer = Conn()
    assert admitted.admit(newcomer, "10.0.0.2")
    assert [conn.aborted for conn in crowd[:2]] == [True, False]
    assert admitted.open == BUDGET


def test_an_address_at_its_share_makes_room_from_its_own_oldest() -> None:
    """Guards the per-address cap: an address at ``per_address`` that opens another
    connection closes its own oldest, not another address's."""
    admitted = admission(per_address=5)
    mine = open_from(admitted, "10.0.0.1", 5)
    theirs = open_from(admitted, "10.0.0.2", 5)
    open_from(admitted, "10.0.0.1", 1)
    assert [conn.aborted for conn in mine] == [True, False, False, False, False]
    assert held(theirs) == 5


def test_vouched_connections_are_not_counted_nor_closed() -> None:
    """Guards ``vouch``: vouched connections leave the places they hold out of the
    shares and are never closed for room; with all 100 vouched for, a new
    connection is refused (nothing can be closed for it), and once one leaves,
    admitted."""
    admitted = admission()
    vouched = open_from(admitted, "10.0.0.1", BUDGET)
    for conn in vouched:
        admitted.vouch(conn)
    assert not admitted.admit(Conn(), "10.0.0.2")
    admitted.leave(vouched[0])
    assert admitted.admit(Conn(), "10.0.0.2")
    assert held(vouched) == BUDGET


def test_shares_are_of_the_places_left_by_vouched_connections() -> None:
    """Guards the share's arithmetic: with 60 of 100 places vouched for, two
    addresses share the other 40, 20 each."""
    admitted = admission()
    for conn in open_from(admitted, "10.0.0.9", 60):
        admitted.vouch(conn)
    first = open_from(admitted, "10.0.0.1", 40)
    second = open_from(admitted, "10.0.0.2", 40)
    assert (held(first), held(second)) == (20, 20)
    assert admitted.share("10.0.0.3") == 40 // 3


def test_a_trusted_proxy_is_not_counted_by_address() -> None:
    """Guards the trusted proxy: its connections take places but no share, and are
    not closed for a newcomer; a newcomer in a process full of them is refused."""
    admitted = admission(per_address=5, trusted=("10.0.0.0/8",))
    proxied = open_from(admitted, "10.0.0.1", BUDGET)
    assert not admitted.admit(Conn(), "192.0.2.1")
    assert held(proxied) == BUDGET


def test_the_busiest_address_is_known_as_connections_come_and_go() -> None:
    """Guards the count of the busiest address (kept as connections come, leave and
    are vouched for, not searched for): once most of the busiest address's
    connections are vouched for and some of another's leave, a newcomer to a full
    process closes the oldest of the address that is busiest then, and only it."""
    admitted = admission()
    first = open_from(admitted, "10.0.0.1", 50)
    second = open_from(admitted, "10.0.0.2", 30)
    third = open_from(admitted, "10.0.0.3", 20)
    for conn in first[:45]:
        admitted.vouch(conn)
    for conn in third[:5]:
        admitted.leave(conn)
    fourth = open_from(admitted, "10.0.0.4", 5)
    assert admitted.open == BUDGET
    open_from(admitted, "10.0.0.5", 1)
    assert [held(c) for c in (first, second, third[5:], fourth)] == [50, 29, 15, 5]
    assert second[0].aborted
