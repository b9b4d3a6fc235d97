"""GraphGPO's per-group transition graph and reverse shortest-path distances to SUCCESS (docs/methods.md section 3).

API summary (pure functions, no numpy needed):
    SUCCESS_NODE, TERMINAL_NODE                    sentinel node names (cannot collide with observations)
    build_transition_graph(transitions) -> TransitionGraph      transitions: iterable of (state, action, next)
    graph.with_transitions(more) -> TransitionGraph             a new graph with more edges (SERO's oracle steps)
    distances_to_success(graph, unreachable="dmax+1") -> dict[node, int]

Distances: unit-cost reverse BFS from SUCCESS (d(SUCCESS) = 0). Nodes that cannot reach SUCCESS get
``d_max + 1`` where d_max is the largest finite distance of any node; when SUCCESS is absent or unreachable from
every node (a group with no success) every node gets 1.

Example:
    >>> g = build_transition_graph([("a", "go", "b"), ("b", "win", SUCCESS_NODE), ("a", "look", "c")])
    >>> distances_to_success(g) == {"a": 2, "b": 1, "c": 3, SUCCESS_NODE: 0}
    True
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SUCCESS_NODE", "TERMINAL_NODE", "TransitionGraph", "build_transition_graph", "distances_to_success"]

SUCCESS_NODE = "\x00<SUCCESS>"
"""The goal node: the last step of a successful episode points here."""
TERMINAL_NODE = "\x00<TERMINAL>"
"""Where a failed episode's last step points when its final observation is not recorded."""


@dataclass(frozen=True)
class TransitionGraph:
    """A directed multigraph of observed transitions.

    Attributes:
        nodes: Every node, in first-appearance order (sources before targets within an edge).
        edges: Every (state, action, next_state) edge, duplicates removed, first-appearance order.
    """

    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str, str], ...]

    def with_transitions(self, transitions: Iterable[tuple[str, str, str]]) -> TransitionGraph:
        """A new graph that also holds ``transitions`` (this one is unchanged)."""
        return build_transition_graph([*self.edges, *transitions])

    def predecessors(self) -> dict[str, set[str]]:
        """For each node, the set of nodes with an edge into it."""
        pred: dict[str, set[str]] = {n: set() for n in self.nodes}
        for src, _, dst in self.edges:
            pred[dst].add(src)
        return pred

    @property
    def has_success(self) -> bool:
        return SUCCESS_NODE in self.nodes


def build_transition_graph(transitions: Iterable[tuple[str, str, str]]) -> TransitionGraph:
    """Build a TransitionGraph from (state, action, next_state) triples (use SUCCESS_NODE for a success).

    Raises:
        TypeError: a state is not a str.
        ValueError: an edge leaves SUCCESS_NODE.
    """
    nodes: dict[str, None] = {}
    edges: dict[tuple[str, str, str], None] = {}
    for tr in transitions:
        src, act, dst = tr
        if not (isinstance(src, str) and isinstance(dst, str)):
            raise TypeError(f"graph states must be str, got {type(src).__name__} -> {type(dst).__name__}")
        if src == SUCCESS_NODE:
            raise ValueError("an edge cannot leave SUCCESS_NODE: it is the absorbing goal")
        nodes.setdefault(src)
        nodes.setdefault(dst)
        edges.setdefault((src, str(act), dst))
    return TransitionGraph(tuple(nodes), tuple(edges))


def distances_to_success(graph: TransitionGraph) -> dict[str, int]:
    """Reverse shortest-path distance (unit costs) of every node to SUCCESS_NODE.

    Returns:
        {node: d} for every node of the graph (SUCCESS_NODE -> 0 when present). Unreachable nodes get
        ``d_max + 1``; if no node reaches SUCCESS every node (SUCCESS excluded) gets 1.
    """
    dist: dict[str, int] = {}
    if graph.has_success:
        pred = graph.predecessors()
        dist[SUCCESS_NODE] = 0
        queue = deque([SUCCESS_NODE])
        while queue:
            node = queue.popleft()
            for p in pred[node]:
                if p not in dist:
                    dist[p] = dist[node] + 1
                    queue.append(p)
    finite = [d for n, d in dist.items() if n != SUCCESS_NODE]
    if not finite:
        return {n: (0 if n == SUCCESS_NODE else 1) for n in graph.nodes}
    fill = max(finite) + 1
    return {n: dist.get(n, fill) for n in graph.nodes}
