"""Layer downloads start in merge order, one at a time, and more run at once only while the merge
waits for data and the node's CPUs have time to spare (the network is what holds it back)."""

from __future__ import annotations

from hydria.image.sources.pacing import IDLE_ENOUGH, LONG_WAIT, STARVED, DownloadQueue, cpu_times


class Node:
    """A node's CPU time counters that the test moves on."""

    def __init__(self) -> None:
        self.idle = self.total = 1000

    def spend(self, ticks: int, idle_share: float) -> None:
        self.idle += int(ticks * idle_share)
        self.total += ticks

    def __call__(self) -> tuple[int, int]:
        return self.idle, self.total


def queue(limit: int = 10) -> tuple[DownloadQueue, list[str], Node]:
    started: list[str] = []
    node = Node()
    return DownloadQueue(started.append, limit, node), started, node


def test_one_download_at_a_time_in_order() -> None:
    downloads, started, _ = queue()
    downloads.add(["top", "middle", "base"])
    assert started == ["top"]
    downloads.ended()
    assert started == ["top", "middle"]
    downloads.ended()
    downloads.ended()
    assert started == ["top", "middle", "base"]


def test_the_blob_the_merge_opens_starts_at_once() -> None:
    downloads, started, _ = queue()
    downloads.add(["top", "middle", "base"])
    downloads.need("base")
    downloads.need("top")  # running already: nothing new
    assert started == ["top", "base"]
    downloads.ended()
    downloads.ended()
    assert started == ["top", "base", "middle"]


def test_a_waiting_merge_on_an_idle_node_gets_more_downloads_up_to_the_limit() -> None:
    downloads, started, node = queue(limit=3)
    downloads.add(["a", "b", "c", "d", "e"])
    node.spend(100, IDLE_ENOUGH + 0.2)
    for _ in range(3):
        downloads.waited(STARVED / 4)
    assert started == ["a"]  # not long enough yet
    downloads.waited(STARVED / 4)
    assert started == ["a", "b"]
    for _ in range(5):
        node.spend(100, 0.9)
        downloads.waited(STARVED)
    assert started == ["a", "b", "c"] and downloads.width == 3
    downloads.ended()
    assert started == ["a", "b", "c", "d"]  # three keep running


def test_a_waiting_merge_on_a_busy_node_gets_no_more_downloads() -> None:
    downloads, started, node = queue()
    downloads.add(["a", "b", "c"])
    for _ in range(5):
        node.spend(100, IDLE_ENOUGH / 2)
        for _ in range(10):
            downloads.waited(STARVED / 10)  # a CPU-bound merge waits milliseconds at a time
    assert started == ["a"] and downloads.width == 1
    node.spend(100, 0.9)  # the CPU got free: now the network is what the merge waits for
    downloads.waited(STARVED)
    assert started == ["a", "b"]


def test_a_long_wait_is_the_network_s_even_on_a_busy_node() -> None:
    """A registry far away: the merge waits for each layer's first bytes, one round trip or more.
    On a node busy with other work, more downloads at once still help."""
    downloads, started, node = queue()
    downloads.add(["a", "b", "c"])
    node.spend(100, 0.0)
    downloads.waited(LONG_WAIT / 2)  # short waits of a CPU-bound merge: nothing more
    assert started == ["a"]
    downloads.waited(LONG_WAIT)
    assert started == ["a", "b"]


def test_nothing_starts_after_close() -> None:
    downloads, started, _ = queue()
    downloads.add(["a", "b"])
    downloads.close()
    downloads.ended()
    downloads.need("b")
    assert started == ["a"]


def test_unlimited_connections() -> None:
    downloads, started, node = queue(limit=0)
    downloads.add([str(n) for n in range(20)])
    for _ in range(19):
        node.spend(100, 1.0)
        downloads.waited(STARVED)
    assert len(started) == 20


def test_cpu_times_of_this_node() -> None:
    idle, total = cpu_times()
    assert 0 <= idle <= total and total > 0
