"""Text-mode WebShop (Yao et al. 2022): our own engine over the released product/goal data (see ``catalog``).

Modules: ``catalog`` (data loading, goals, BM25 search), ``reward`` (official purchase reward), ``engine`` (pages
and actions as a pure state machine), ``env`` (``WebShopEnv`` + scripted expert).

Data: ``WEBSHOP_DATA`` (or ``data_dir=``) points at a folder with the product and attribute files.  Our shared
122-product excerpt works out of the box; for the official 1000-product set run princeton-nlp/WebShop's
``./setup.sh -d small`` (``items_shuffle_1000.json`` + ``items_ins_v2_1000.json``), for the full 1.18 M catalogue
``./setup.sh -d all`` (``items_shuffle.json`` + ``items_ins_v2.json``, plus ``items_human_ins.json`` for the
12k human goals: ``WebShopEnv(goals="human")``), and point ``WEBSHOP_DATA`` at the ``data/`` folder it fills.
Needs ``rank-bm25==0.2.2`` (``pip install 'hierarl[webshop]'``).
"""

from envs.webshop.env import SPLITS, WebShopEnv

__all__ = ["SPLITS", "WebShopEnv"]
