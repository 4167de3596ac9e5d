"""Design convergence: TF-IDF fallback, shuffled-author null, multi-author clusters, Vendi."""

from __future__ import annotations

import numpy as np
import pytest

from envduels.analysis import convergence, tfidf, vendi_score

MAZE = "class Maze:\n    def step(self, action):\n        # move through the maze grid north south east west\n"
CIPHER = "class Cipher:\n    def step(self, action):\n        # decode the caesar cipher shift letters alphabet\n"
NIM = "class Nim:\n    def step(self, action):\n        # take stones from heaps nim sum xor winning move\n"


def test_tfidf_rows_are_unit_vectors_and_identical_texts_match():
    v = tfidf([MAZE, MAZE, CIPHER])
    assert np.linalg.norm(v, axis=1) == pytest.approx([1, 1, 1])
    assert v[0] @ v[1] == pytest.approx(1.0)
    assert v[0] @ v[2] < 0.5


def test_vendi_counts_distinct_designs():
    assert vendi_score(np.eye(4)) == pytest.approx(4.0)
    assert vendi_score(np.ones((4, 1))) == pytest.approx(1.0)
    assert vendi_score(np.zeros((0, 3))) is None


def test_authors_with_their_own_designs_are_more_distinct_than_the_null():
    texts = [MAZE + f"# v{i}" for i in range(4)] + [CIPHER + f"# v{i}" for i in range(4)] + [NIM + f"# v{i}" for i in range(4)]
    authors = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    out = convergence([f"e{i}" for i in range(12)], authors, texts, permutations=200)
    assert out["method"] in ("tfidf", "minilm")
    assert out["within_author_similarity"] > out["cross_author_similarity"]
    assert out["p_distinct"] < 0.05 and out["p_converge"] > 0.5
    assert out["multi_author_clusters"] == 0
    assert len(out["map"]) == 12


def test_authors_converging_on_one_design_form_a_multi_author_cluster():
    texts = [MAZE + "# a", MAZE + "# b", CIPHER + "# a", NIM + "# b"]
    out = convergence(["e1", "e2", "e3", "e4"], ["a", "b", "a", "b"], texts, permutations=100)
    assert out["multi_author_clusters"] == 1
    assert out["clusters"][0]["authors"] == ["a", "b"]
    assert set(out["clusters"][0]["environments"]) == {"e1", "e2"}
