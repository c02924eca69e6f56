"""Conformance: one suite per catalog kind, run over built-in and user entries alike before they are used.

Why a stage of its own: the checks execute entries (build graphs, run them on a device), so they stand on
the engine; the catalog below them holds only the registry and the contracts an entry is written against.
"""
