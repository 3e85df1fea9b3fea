"""``litdata_collate``: StreamingDataLoader's default collate, litdata's rule.

Graph samples (PyG ``Data``/``HeteroData`` or :class:`shardwright.Graph`) are batched with
``torch_geometric.data.Batch`` (a list of graphs without torch_geometric); a dict holding
graphs is collated key by key; everything else goes to torch's ``default_collate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..format import Graph

__all__ = ["litdata_collate"]


def _is_graph(value: Any) -> bool:
    module = getattr(type(value), "__module__", "")
    return isinstance(value, Graph) or (module.startswith("torch_geometric.data") and hasattr(value, "to_dict"))


def _graphs(items: list[Any]) -> Any:
    try:
        from torch_geometric.data import Batch, Data, HeteroData
    except ImportError:
        return items
    graphs = []
    for item in items:
        if isinstance(item, Graph):
            mapping = item.to_mapping()
            hetero = any(isinstance(v, dict) and any(hasattr(c, "shape") for c in v.values()) for v in mapping.values())
            item = (HeteroData if hetero else Data).from_dict(mapping)
        graphs.append(item)
    return Batch.from_data_list(graphs)


def litdata_collate(items: list[Any]) -> Any:
    """Collate a batch as litdata's StreamingDataLoader does by default."""
    from torch.utils.data import default_collate

    if not items:
        return items
    first = items[0]
    if _is_graph(first):
        return _graphs(items)
    if isinstance(first, Mapping) and any(_is_graph(first[key]) for key in first):
        return {key: litdata_collate([item[key] for item in items]) for key in first}
    return default_collate(items)
