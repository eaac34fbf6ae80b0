"""What the commands return: the CLI's report (its --json) as an object, its printed text as repr(), its page
(--html) as the notebook's view and .html(path); rows for pandas."""
import html as html_text
import json


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError("to_pandas() needs pandas (apt-get install python3-pandas)") from None
    return pandas


class Result:
    """A command's outcome: `report` (the CLI's --json, a dict), `text` (what it printed), `page` (its
    --html page, where it has one)."""

    def __init__(self, report, text, page=None):
        self.report = report
        self.text = text
        self.page = page

    def __repr__(self):
        return self.text.rstrip("\n") if self.text else f"<{type(self).__name__}>"

    def html(self, path):
        """Writes the CLI's page for this result (what --html writes) to path."""
        if self.page is None:
            raise ValueError(f"{type(self).__name__} has no page")
        with open(path, "w") as f:
            f.write(self.page)
        return path

    def _repr_html_(self):
        if self.page is None:
            return None
        # the page is a whole document with its own script: framed, it runs as it does when opened
        return (f'<iframe srcdoc="{html_text.escape(self.page, quote=True)}" style="width: 100%; height: 640px; '
                'border: 0" sandbox="allow-scripts"></iframe>')


class Plan(Result):
    """A memory plan (dp plan) or profile (dp memprof): each device's peak, by category and phase."""

    def __init__(self, report, text, page=None):
        super().__init__(report, text, page)
        # --compare: a row per strategy, each with its own report; the first is the run as given
        self.comparison = report.get("compare")
        self.base = self.comparison[0]["report"] if self.comparison else report

    @property
    def devices(self):
        return self.base["devices"]

    def peak(self, device=0):
        """Device `device`'s peak, in bytes."""
        return self.devices[device]["peak_bytes"]

    def at_peak(self, device=0):
        """{category: bytes} in use on `device` at its peak."""
        return dict(self.devices[device]["at_peak"])

    def table(self):
        """A row per step, phase, device and category: the bytes in use at that phase's peak."""
        rows = []
        for entry in self.base.get("timeline", []):
            for index, device in enumerate(entry["devices"]):
                for category, used in device["at_peak"].items():
                    rows.append({"step": entry["step"], "phase": entry["phase"], "device": index, "category": category,
                                 "bytes": used})
        return rows

    def strategies(self):
        """--compare's rows: each strategy's device 0 and largest other peak, model state and bytes sent."""
        return [{k: v for k, v in row.items() if k != "report"} for row in (self.comparison or [])]

    def to_pandas(self):
        return _pandas().DataFrame(self.table())


class Run(Result):
    """A training run (dp train): `history` its step rows (loss, phase times, peaks), `evaluations` its
    held-out rows, `weights` the trained state by name, `checkpoint` the folder given, if any."""

    def __init__(self, history, evaluations, weights, text, checkpoint=None):
        super().__init__({"history": history, "evaluations": evaluations}, text)
        self.history = history
        self.evaluations = evaluations
        self.weights = weights
        self.checkpoint = checkpoint

    @property
    def losses(self):
        return [row["loss"] for row in self.history]

    def html(self, path):
        """Writes the run's summary (dp train has no page of its own) as an HTML file."""
        with open(path, "w") as f:
            f.write(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dp train</title></head>"
                    f"<body>{self._repr_html_()}</body></html>\n")
        return path

    def to_pandas(self):
        return _pandas().DataFrame(self.history)

    def _repr_html_(self):
        last = self.history[-1] if self.history else {}
        rows = "".join(f"<tr><td>{html_text.escape(k)}</td><td>{html_text.escape(str(v))}</td></tr>"
                       for k, v in (("steps", len(self.history)), ("last loss", last.get("loss")),
                                    *((f"{k} after step {e.get('after_step')}", e[k]) for e in self.evaluations[-1:]
                                      for k in ("test_loss", "test_accuracy") if k in e)))
        return f"<table><caption>dp train</caption>{rows}</table>"


def read_metrics(path):
    """--metrics' rows: (steps, evaluations)."""
    steps, evaluations = [], []
    with open(path) as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                (evaluations if "after_step" in row else steps).append(row)
    return steps, evaluations
