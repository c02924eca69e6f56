"""`%load_ext scellis_jupyter`: the `%%scellis` cell magic and the `%scellis` line magics.

    %%scellis mlp                  a cell holding a spec (TOML); binds `mlp`, shows its graph and plan
    %%scellis catalog optimizer my_sgd    a cell holding Python that registers a catalog entry
    %scellis train mlp --steps 200        returns at once; a run panel and loss curve follow the run
    %scellis wait mlp                     blocks until it ends, then shows the run record (and its pin)
    %scellis explain mlp                  the training step's stages: graph, kernels, arena plan, WGSL

Every mistake is an IPython UsageError carrying the shared diagnostic text (never a traceback). Parsing
lives in parse.py; what is shown in display.py; the model handle in handle.py.
"""
from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from ..errors import NOTICE, ScellisError, stderr_note
from . import display as show
from .handle import Model, lr_find, measured_profile, profile, profile_text
from .parse import MagicError, cell_diagnostic, parse_cell_header, parse_line


def _usage(e: ScellisError) -> UsageError:
    """The diagnostic's text (`error[code] at where: message` + hint) as IPython's no-traceback error."""
    return UsageError(str(e))


@magics_class
class ScellisMagics(Magics):
    """One magic, `scellis`, as a line magic (subcommands) and a cell magic (a spec or a catalog entry)."""

    def __init__(self, shell):
        super().__init__(shell)
        self.models: dict[str, Model] = {}

    # ---- entry --------------------------------------------------------------------------------------------
    @line_cell_magic
    def scellis(self, line: str, cell: str | None = None):
        try:
            if cell is not None:
                return self._cell(line, cell)
            return self._line(line)
        except UsageError:
            raise
        except ScellisError as e:
            raise _usage(e) from None
        except KeyboardInterrupt:
            raise UsageError("interrupted (a background run keeps training: %scellis stop NAME)") from None

    # ---- cells --------------------------------------------------------------------------------------------
    def _cell(self, line: str, cell: str):
        head = parse_cell_header(line)
        if head.mode == "catalog":
            return self._catalog_cell(head.kind, head.name, cell)
        ns = self.shell.user_ns
        old = self.models.get(head.name)
        if old is not None and old.run is not None and old.run.state not in ("finished", "failed", "interrupted",
                                                                               "refused"):
            raise MagicError(f"{head.name} is training (run {old.run.run_id}); redefining it now would lose the "
                             "handle to that run", where=f"cell {head.name}, line 1", code="magic-busy",
                             hint=f"%scellis wait {head.name} or %scellis stop {head.name} first")
        model = Model(head.name, cell, ns, header=f"%%scellis {line.strip()}")
        if old is not None:
            model.runs = old.runs            # the history of a redefined model stays reachable
        self.models[head.name] = model
        ns[head.name] = model
        if not head.options.get("quiet"):
            if not head.options.get("no_graph"):
                display(show.graph_output(model.graph_info(), on_edit=model.edit))
            if not head.options.get("no_plan"):
                self._show_plan(model, in_cell=True, memory=head.options.get("memory"))
        return None

    def _show_plan(self, model: Model, in_cell: bool = False, **kw) -> None:
        try:
            p = model.plan(**kw)
        except ScellisError as e:
            raise _usage(e) from None
        def on_fix(i: int):
            new_plan, text = model.apply_fix(i, memory=kw.get("memory"))
            return new_plan, (text if in_cell else None)      # a %scellis plan line's cell keeps its own text
        display(show.plan_output(p, on_fix=on_fix))

    def _catalog_cell(self, kind: str, name: str, source: str):
        from ..catalog.registry import load_source
        from ..errors import CatalogError
        try:
            entries = load_source(source, name, check=True)
        except CatalogError as e:                       # at '<cell:NAME>:L': moved onto the cell's own line
            d = cell_diagnostic(e.diagnostic, f"<cell:{name}>", name, source)
            if d is e.diagnostic:
                raise
            raise type(e)(d.message, where=d.where, hint=d.hint, code=d.code, **d.details) from None
        mine = [e for e in entries if e.kind == kind]
        if not mine:
            got = ", ".join(f"{e.kind} {e.name}" for e in entries) or "nothing"
            raise MagicError(f"the cell registered no {kind} (it registered {got})", where=f"catalog cell {name}",
                             hint=f"decorate it with @register_{kind}(\"{name}\") or call register(\"{kind}\", ...)")
        display(show.catalog_output([e.describe() for e in entries]))
        return None

    # ---- lines --------------------------------------------------------------------------------------------
    def _line(self, line: str):
        cmd = parse_line(line)
        if cmd.help is not None:
            display(show.text_output(cmd.help))
            return None
        return getattr(self, "_do_" + cmd.sub.replace("-", "_"))(cmd)

    def model(self, name: str) -> Model:
        m = self.models.get(name)
        if m is None:
            obj = self.shell.user_ns.get(name)
            if isinstance(obj, Model):
                m = self.models[name] = obj
        if m is None:
            from ..errors import did_you_mean
            names = list(self.models)
            raise MagicError(f"no model named {name!r} in this notebook", where="%scellis",
                             code="magic-unknown-model",
                             hint=did_you_mean(name, names) or (f"models: {', '.join(names)}" if names else
                                                               f"define it first in a cell: %%scellis {name}"))
        return m

    def _run_of(self, name: str):
        """(model or None, BackgroundRun or None, run id) for a model handle or a run id."""
        if name in self.models or isinstance(self.shell.user_ns.get(name), Model):
            m = self.model(name)
            return m, m.run, (m.run.run_id if m.run is not None else None)
        if name.startswith("run-") or len(name) >= 6:
            return None, None, name
        return self.model(name), None, None

    def _do_plan(self, cmd):
        m = self.model(cmd.name)
        if cmd.json:
            display(show.json_output(m.plan(memory=cmd.memory, batch_size=cmd.batch_size, device=cmd.device).to_json()))
            return None
        self._show_plan(m, memory=cmd.memory, batch_size=cmd.batch_size, device=cmd.device)

    def _do_train(self, cmd):
        m = self.model(cmd.name)
        br = m.train(steps=cmd.steps, store=cmd.store, epochs=cmd.epochs, checkpoint_every=cmd.checkpoint_every,
                     eval_every=cmd.eval_every, device=cmd.device, tier=cmd.tier, memory=cmd.memory)
        self._follow(m, br)
        if cmd.wait:
            return self._wait(m, br, None)
        return None

    def _follow(self, m: Model, br) -> None:
        show.show_training(br, display, on_resume=lambda: m.resume())

    def _do_resume(self, cmd):
        m, br, rid = self._run_of(cmd.name)
        if m is None:
            raise MagicError(f"{cmd.name} is a run id; resume it through its model or the CLI",
                             where="%scellis resume", hint=f"scellis resume {cmd.name}   (in a terminal)")
        if br is not None and br.state == "failed":
            raise MagicError(f"run {br.run_id} failed; it has no clean state to resume", where=f"run {br.run_id}",
                             code="run-ended", hint=f"fix the cause and train again: %scellis train {m.name}")
        nb = m.resume(steps=cmd.steps, store=cmd.store)
        self._follow(m, nb)
        if cmd.wait:
            return self._wait(m, nb, None)
        return None

    def _do_stop(self, cmd):
        m = self.model(cmd.name)
        br = m.run
        if br is None:
            raise MagicError(f"{m.name} has no run to stop", where=f"model {m.name}", code="run-ended",
                             hint=f"%scellis train {m.name}")
        br.stop()
        display(show.text_output(f"stopping {m.name} (run {br.run_id}) at the next step; it is checkpointed and "
                                 f"recorded interrupted (resume: %scellis resume {m.name})"))

    def _do_wait(self, cmd):
        m, br, rid = self._run_of(cmd.name)
        if m is not None and br is None:
            raise MagicError(f"{m.name} has no run to wait for", where=f"model {m.name}",
                             hint=f"%scellis train {m.name} first")
        return self._wait(m, br, cmd.timeout, rid)

    def _wait(self, m, br, timeout, rid=None):
        from ..run.lifecycle import follow, open_store
        if br is not None:
            rec = br.wait(timeout)
            st = br.run.store
            if st is None or rec is None or isinstance(rec, dict):
                display(show.json_output(br.result))
                return None
            display(show.record_output(rec, st, br.result))
            return None
        st = open_store(None, create=False)
        for ev in follow(st, rid, timeout=timeout):
            if ev.get("event") == "done":
                display(show.record_output(st.get_run(ev["run"]), st))
        return None

    def _do_runs(self, cmd):
        from ..run.lifecycle import open_store
        st = open_store(cmd.store, create=False)
        _index_warnings(st)
        recs = st.list_runs()
        for d in recs.diagnostics():
            display(show.text_output(d.format()))
        rows = [{"run": r.id, "state": r.state, "spec": (r.extra or {}).get("spec_name"),
                 "steps": (r.extra or {}).get("steps", r.last_checkpoint_step(st)), "tier": r.tier,
                 "device": (r.device or {}).get("backend"), "last_checkpoint": r.last_checkpoint} for r in recs]
        if cmd.json:
            display(show.json_output(rows))
            return None
        if not rows:
            display(show.text_output(f"no runs in {st.root}"))
            return None
        cols = ("run", "state", "spec", "steps", "tier", "device")
        table = [cols] + [tuple("-" if r[c] is None else str(r[c]) for c in cols) for r in rows]
        wd = [max(len(t[i]) for t in table) for i in range(len(cols))]
        display(show.text_output("\n".join("  ".join(c.ljust(w) for c, w in zip(t, wd)).rstrip() for t in table)))

    def _do_show(self, cmd):
        if cmd.name in self.models or isinstance(self.shell.user_ns.get(cmd.name), Model):
            m = self.model(cmd.name)
            if cmd.json:
                display(show.json_output({"spec": m.spec.to_dict(), "graph": m.graph_info()}))
                return None
            display(show.graph_output(m.graph_info(), on_edit=m.edit))
            self._show_plan(m)
            return None
        from ..run.lifecycle import open_store
        st = open_store(cmd.store, create=False)
        _index_warnings(st)
        rec = st.get_run(cmd.name)
        display(show.json_output(rec.to_json()) if cmd.json else show.record_output(rec, st))

    def _do_device(self, cmd):
        from .. import settings
        from ..backends.device import device, use
        if cmd.name:
            use(cmd.name)                    # refused, with nothing changed, when it is not available
        info = device().to_json()
        info["settings"] = settings.in_effect()            # SCELLIS_* set here (e.g. by %env), by name
        if cmd.json:
            display(show.json_output(info))
            return None
        keys = ("backend", "name", "adapter_type", "memory_bytes", "memory_source", "choice")
        lines = [f"{k:14} {info.get(k)}" for k in keys]
        lines += ["settings"] + settings.report()
        display(show.text_output("\n".join(lines)))

    def _do_catalog(self, cmd):
        from ..catalog.registry import KINDS, get, list_entries
        from ..errors import did_you_mean
        if cmd.kind is not None and cmd.kind not in KINDS:
            raise MagicError(f"unknown catalog kind {cmd.kind!r}", where="%scellis catalog", code="magic-unknown",
                             hint=(did_you_mean(cmd.kind, KINDS) + " " if did_you_mean(cmd.kind, KINDS) else "")
                             + f"kinds: {', '.join(KINDS)}")
        desc = [get(cmd.kind, cmd.entry).describe()] if cmd.entry else list_entries(cmd.kind)
        display(show.json_output(desc) if cmd.json else show.catalog_output(desc))

    def _do_verify(self, cmd):
        from ..run.verify import verify
        m, br, rid = self._run_of(cmd.name)
        if rid is None:
            raise MagicError(f"{cmd.name} has no run to verify", where="%scellis verify",
                             hint=f"%scellis train {cmd.name} first")
        if br is not None and br.state not in ("finished",):
            raise MagicError(f"run {rid} is {br.state}; only a finished run can be verified", where=f"run {rid}",
                             code="run-ended", hint=f"%scellis wait {cmd.name}" if br.state in ("running", "paused",
                                                                                                 "starting") else "")
        st = br.run.store if br is not None else cmd.store
        v = verify(rid, store=st, tolerance=cmd.tolerance)
        display(show.text_output("\n".join(v.lines())))
        return None

    def _do_profile(self, cmd):
        m = self.model(cmd.name)
        display(show.text_output(profile_text(profile(m, batch_size=cmd.batch_size, top=cmd.top))))
        if not cmd.static:                  # measured: a few real steps, kernel by kernel, as a bar chart too
            display(show.profile_output(measured_profile(m, steps=cmd.steps, device=cmd.device, top=cmd.top)))

    def _do_explain(self, cmd):
        m = self.model(cmd.name)
        display(show.explain_output(m.explain_data(batch_size=cmd.batch_size, device=cmd.device)))

    def _do_lr_find(self, cmd):
        m = self.model(cmd.name)
        res = lr_find(m, steps=cmd.steps, lr_min=cmd.min_lr, lr_max=cmd.max_lr, device=cmd.device)

        def apply(lr: float) -> str:
            from ..spec.edit import _doc
            import tomlkit
            doc = _doc(m.text)
            rec = doc.setdefault("recipe", tomlkit.table())
            opt = rec.get("optimizer")
            if opt is None:
                rec["optimizer"] = {"name": "adamw", "lr": float(lr)}
            else:
                opt["lr"] = float(lr)
            m.set_text(tomlkit.dumps(doc))
            return m.cell_text()

        d = res.to_dict()
        display(show.lr_find_output({"lrs": d["lrs"], "losses": [x if x is not None else float("nan") for x in d["losses"]],
                                     "suggested": d["suggestion"]}, on_apply=apply))
        m.lr_find_result = res
        return None

    def _do_pool(self, cmd):
        from ..pool import Pool
        from .pool_view import pool_output
        ns = self.shell.user_ns
        if not cmd.name.isidentifier():
            raise MagicError(f"--name {cmd.name!r} is not a Python identifier", where="%scellis pool",
                             code="magic-usage")
        current = ns.get(cmd.name)
        if cmd.close:
            if not isinstance(current, Pool):
                raise MagicError(f"no pool named {cmd.name!r} to close", where="%scellis pool", code="magic-usage")
            current.close()
            ns.pop(cmd.name, None)
            display(show.text_output(f"pool {cmd.name} closed"))
            return None
        if cmd.workers is not None or cmd.address is not None:
            if cmd.threads and cmd.workers is None:
                raise MagicError("--threads goes with --workers", where="%scellis pool", code="magic-usage")
            if isinstance(current, Pool):
                current.close()
            kw = {"trust": cmd.trust} if cmd.trust is not None else {}
            if cmd.address is not None:
                current = Pool(address=cmd.address, timeout=cmd.timeout, **kw)
            else:
                current = Pool(workers=cmd.workers, processes=not cmd.threads, **kw)
            ns[cmd.name] = current
        elif not isinstance(current, Pool):
            raise MagicError(f"no pool named {cmd.name!r} in this notebook", where="%scellis pool",
                             code="magic-no-pool", hint="%scellis pool --workers 2 starts a local one")
        out = pool_output(current)
        display(show.json_output(out.extra["application/vnd.scellis.pool+json"]) if cmd.json else out)
        return None

    def _do_sweep(self, cmd):
        from ..pool import Pool
        from .pool_view import heatmap_sweep
        from .widgets import HeatmapView
        m = self.model(cmd.name)
        pool = self.shell.user_ns.get(cmd.pool)
        if not isinstance(pool, Pool):
            raise MagicError(f"no pool named {cmd.pool!r} in this notebook", where="%scellis sweep",
                             code="magic-no-pool", hint="%scellis pool --workers 2 starts a local one")
        if len(cmd.grid) != 2 or cmd.grid[0][0] == cmd.grid[1][0]:
            raise MagicError(f"a heatmap sweep takes two different --grid axes, got {len(cmd.grid)}",
                             where="%scellis sweep", code="magic-usage",
                             hint="--grid optimizer.lr=1e-3,1e-2 --grid batch_size=32,64")
        if m.spec.memory is not None:
            raise MagicError(f"{m.name} trains on this notebook's arrays, which a sweep does not ship to workers yet",
                             where="%scellis sweep", hint="name a dataset in [data] (dataset = \"digits\")")
        metrics = m.spec.recipe.get("metrics") or []
        metric = cmd.metric or (f"val_{metrics[0]}" if metrics else "val_loss")
        grid = dict(cmd.grid)
        (xk, xs), (yk, ys) = cmd.grid
        view = HeatmapView(xk, xs, yk, ys, metric)
        display(view)
        _, res = heatmap_sweep(pool, m.spec, grid, metric=metric, steps=cmd.steps, view=view, verify=cmd.verify)
        m.sweep_result = res
        display(show.text_output(f"{len(res.value)} cells of {m.name} on the pool ({metric}); "
                                 f"{res.checked} re-checked, {len(res.rejected)} rejected; {m.name}.sweep_result "
                                 "holds every cell"))
        return None


def _note(text: str) -> None:
    display(show.note_output(text))


def load_ipython_extension(ip) -> None:
    """`%load_ext scellis_jupyter`; notes (the not-a-GPU banner, the default tier) are displayed, neutral,
    not red stderr."""
    ip.register_magics(ScellisMagics)
    NOTICE[0] = _note
    from ..backends.wgpu import browser
    from .widgets.gpu_device import comm_transport
    browser.set_transport(comm_transport)       # the browser device asks the page on first use


def unload_ipython_extension(ip) -> None:
    """`%unload_ext scellis_jupyter`: the magics go; models already bound stay in the namespace."""
    mm = ip.magics_manager
    for kind in ("line", "cell"):
        mm.magics[kind].pop("scellis", None)
    mm.registry.pop("ScellisMagics", None)
    if NOTICE[0] is _note:
        NOTICE[0] = stderr_note
    from ..backends.wgpu import browser
    browser.set_transport(None)


__all__ = ["ScellisMagics", "load_ipython_extension", "unload_ipython_extension"]


def _index_warnings(st) -> None:
    """Say, before answering from it, that the store's index is damaged or disagrees with the objects (each
    diagnostic names the fix, `scellis fsck --rebuild-index`), as `scellis runs` and `show` do."""
    for d in st.index_diagnostics():
        display(show.text_output(d.format()))
