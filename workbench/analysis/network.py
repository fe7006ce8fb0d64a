"""Links that dropped or slowed while the run went on, from the ranks' network counters (``workbench.net_probe``).

Why: the link check at start names a link that was slow all along (``findings.slow_link_finding``); a
cable pulled for 20 s or a port that falls to a tenth of its speed mid-run shows only in what the
ranks' TCP connections did then. Each rank's heartbeat wrote, per peer address, the rate its
connections carried while they had data in flight, and how long a connection had waited for an
answer. Here those become, per pair of hosts and second of the run:

- **a link down**: connections waiting for an answer for ``LINK_DOWN_AFTER_S`` or more; the host
  common to every waiting pair is the one whose link is down (two hosts: the link between them), and
  an interface without carrier says so outright (at once);
- **a link slowed**: a host's link rate (its fastest pair: a slow peer does not make it look slow,
  as at start) below ``SLOWED_SHARE`` of its own usual rate (``USUAL_QUANTILE`` of its seconds) for
  at least ``MIN_SLOW_S``, while another host's was not (of two hosts: the link between them).

The reduction per group is the counters' rows and the ranks' communication seconds per second of the
run: small (a few rows per rank and second), so it merges at any size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.findings import FINDING_COLUMNS, combine_findings
from workbench.net_probe import LINK_RATE, LINK_UNANSWERED, NO_CARRIER, split_counter_name, suspect_link

NETWORK_COLUMNS = ("rank", "host", "time_ns", "kind", "target", "value")
COMMUNICATION_COLUMNS = ("rank", "second", "communication_s")
#: A host's link rate under this share of its usual rate is slowed.
SLOWED_SHARE = 0.5
#: A host's usual rate: this quantile of its seconds' rates (a link slowed for up to 3/4 of the run is still seen).
USUAL_QUANTILE = 0.75
#: Seconds connections must wait for an answer to name a link down where no interface lost its carrier: TCP's
#: retransmission timeouts on a congested or slowed link leave a connection waiting 1-3 s (seen at 100 Mbit/s).
LINK_DOWN_AFTER_S = 5.0
#: Seconds a host's link must stay slowed to be named (one slow second is a busy switch).
MIN_SLOW_S = 2
#: Seconds without a rate that a slowed stretch may span (a second with too few bytes to measure).
GAP_S = 1


def network_rows(counters: pd.DataFrame | None, rank_meta: pd.DataFrame | None) -> tuple[pd.DataFrame, dict]:
    """The network counters of a group of ranks as rows (``NETWORK_COLUMNS``) and the ranks' addresses' hosts.

    ``target`` is the peer's address or the interface's name, as the counter's name carries it."""
    addresses: dict[str, str] = {}
    if rank_meta is not None and len(rank_meta) and "addresses" in rank_meta and "host" in rank_meta:
        for host, listed in zip(rank_meta["host"], rank_meta["addresses"]):
            if isinstance(listed, (list, tuple, np.ndarray)):
                addresses.update({str(address): str(host) for address in listed})
    empty = pd.DataFrame({column: pd.Series(dtype="object") for column in NETWORK_COLUMNS})
    if counters is None or counters.empty or "name" not in counters:
        return empty, addresses
    names = counters["name"].astype(str)
    split = {name: split_counter_name(name) for name in names.unique()}
    chosen = names.map(lambda name: split[name] is not None).to_numpy(bool)
    if not chosen.any():
        return empty, addresses
    picked = counters[chosen]
    kinds = names[chosen].map(lambda name: split[name][0])
    targets = names[chosen].map(lambda name: split[name][1])
    rows = pd.DataFrame(
        {
            "rank": picked["rank"].astype("int64").to_numpy(),
            "host": picked["host"].astype(str).to_numpy() if "host" in picked else "",
            "time_ns": picked["time_ns"].astype("int64").to_numpy(),
            "kind": kinds.to_numpy(),
            "target": targets.to_numpy(),
            "value": picked["value"].astype("float64").to_numpy(),
        }
    )
    return rows, addresses


def no_communication() -> pd.DataFrame:
    """No rank's communication seconds (``COMMUNICATION_COLUMNS``): where no spans were read."""
    return pd.DataFrame({column: pd.Series(dtype="float64") for column in COMMUNICATION_COLUMNS})


def communication_per_second(events: pd.DataFrame) -> pd.DataFrame:
    """Each rank's seconds in ``communication`` spans, by the whole second of the epoch its span's middle is in."""
    if events is None or not len(events):
        return no_communication()
    spans = events[events["phase"] == ev.COMMUNICATION]
    if not len(spans):
        return no_communication()
    middle = (spans["start_ns"] // 2 + spans["end_ns"] // 2) // ev.NS_PER_S
    seconds = (spans["end_ns"] - spans["start_ns"]) / ev.NS_PER_S
    table = seconds.groupby([spans["rank"].astype("int64"), middle.astype("int64")]).sum()
    table.index.names = ["rank", "second"]
    return table.rename("communication_s").reset_index()


def reduce_network(counters: pd.DataFrame | None, rank_meta: pd.DataFrame | None, events: pd.DataFrame) -> dict:
    """What one group of ranks gives the network findings: its rows, its addresses and its communication."""
    rows, addresses = network_rows(counters, rank_meta)
    hosts: dict[int, str] = {}
    if rank_meta is not None and len(rank_meta) and {"rank", "host"} <= set(rank_meta.columns):
        hosts = {int(rank): str(host) for rank, host in zip(rank_meta["rank"], rank_meta["host"])}
    starts = [int(events["start_ns"].min())] if events is not None and len(events) else []
    starts += [int(counters["time_ns"].min())] if counters is not None and len(counters) else []
    return {
        "rows": rows,
        "addresses": addresses,
        "hosts": hosts,
        "start_ns": min(starts, default=None),
        "communication": communication_per_second(events),
    }


def _peer_hosts(rows: pd.DataFrame, addresses: Mapping[str, str]) -> pd.Series:
    """The host behind each row's peer address (the address itself where no rank of the run has it)."""
    return rows["target"].map(lambda target: addresses.get(str(target), str(target)))


def _hosts_text(hosts: list[str]) -> str:
    return hosts[0] if len(hosts) == 1 else ", ".join(hosts[:-1]) + f" and {hosts[-1]}"


def link_down_rows(
    rows: pd.DataFrame, addresses: Mapping[str, str], start_ns: int, ranks_of: dict
) -> list[dict[str, Any]]:
    """A finding per stretch of the run in which connections waited for an answer (``link_down``)."""
    waiting = rows[rows["kind"] == LINK_UNANSWERED]
    carrier = rows[rows["kind"] == NO_CARRIER]
    if waiting.empty and carrier.empty:
        return []
    intervals = []  # (from ns, to ns, host, peer host)
    for row, peer in zip(waiting.itertuples(index=False), _peer_hosts(waiting, addresses)):
        if peer != row.host:
            intervals.append((row.time_ns - int(row.value * ev.NS_PER_S), row.time_ns, row.host, peer))
    for row in carrier.itertuples(index=False):
        intervals.append((row.time_ns - ev.NS_PER_S, row.time_ns, row.host, f"interface {row.target}"))
    intervals.sort()
    episodes: list[list[tuple]] = []
    for interval in intervals:
        if episodes and interval[0] <= max(end for _s, end, _h, _p in episodes[-1]) + 2 * ev.NS_PER_S:
            episodes[-1].append(interval)
        else:
            episodes.append([interval])
    found = []
    for episode in episodes:
        carrier_lost = any(peer.startswith("interface ") for _s, _e, _h, peer in episode)
        longest = max((end - start for start, end, _h, peer in episode if not peer.startswith("interface ")), default=0)
        if not carrier_lost and longest < LINK_DOWN_AFTER_S * ev.NS_PER_S:
            continue  # a congested or slowed link's retransmission timeouts (200 ms, doubling): not a link down
        began, ended = max(start_ns, min(i[0] for i in episode)), max(i[1] for i in episode)
        pairs = sorted({(host, peer) for _s, _e, host, peer in episode if not peer.startswith("interface ")})
        no_carrier = {}
        for _s, _e, host, peer in episode:
            if peer.startswith("interface "):
                no_carrier.setdefault(host, set()).add(peer.removeprefix("interface "))
        suspect, described = suspect_link(pairs, {host: sorted(names) for host, names in no_carrier.items()})
        lasted = (ended - began) / ev.NS_PER_S
        ranks = ranks_of.get(suspect, []) if suspect else []
        found.append(
            {
                "host": suspect or "",
                "began_ns": began,
                "ended_ns": ended,
                "kind": "link_down",
                "text": f"{described} for {ev.format_seconds(lasted)}, from"
                f" {ev.format_seconds((began - start_ns) / ev.NS_PER_S)} to"
                f" {ev.format_seconds((ended - start_ns) / ev.NS_PER_S)} into the run; every rank that exchanges with"
                f" {'its ranks' if suspect else 'them'} waited meanwhile: check the node's cable, port and switch"
                " (its kernel log says when the link went down)",
                "seconds_lost": lasted,
                "ranks": ev.rank_list(ranks) if ranks else "",
            }
        )
    return found


def link_rates(rows: pd.DataFrame, addresses: Mapping[str, str], start_ns: int) -> pd.DataFrame:
    """Each host's link rate (bytes/s) per second of the run: its fastest pair's, as sender or receiver."""
    rates = rows[rows["kind"] == LINK_RATE]
    if rates.empty:
        return pd.DataFrame(columns=["host", "second", "bytes_per_s"])
    peers = _peer_hosts(rates, addresses)
    known = peers.isin(set(addresses.values())).to_numpy() & (peers.to_numpy() != rates["host"].to_numpy())
    rates, peers = rates[known], peers[known]
    second = ((rates["time_ns"] - start_ns) // ev.NS_PER_S).astype("int64").to_numpy()
    both = pd.DataFrame(
        {
            "host": np.concatenate([rates["host"].to_numpy(), peers.to_numpy()]),
            "second": np.concatenate([second, second]),
            "bytes_per_s": np.concatenate([rates["value"].to_numpy(), rates["value"].to_numpy()]),
        }
    )
    return both.groupby(["host", "second"], as_index=False)["bytes_per_s"].max()


def slowed_link_rows(
    rows: pd.DataFrame, addresses: Mapping[str, str], start_ns: int, communication: pd.DataFrame, ranks_of: dict
) -> list[dict[str, Any]]:
    """A finding per host whose link carried under ``SLOWED_SHARE`` of its usual rate a while (``slowed_link``)."""
    rates = link_rates(rows, addresses, start_ns)
    if rates.empty or rates["host"].nunique() < 2:
        return []
    usual = rates.groupby("host")["bytes_per_s"].quantile(USUAL_QUANTILE)
    rates = rates.assign(slowed=rates["bytes_per_s"] < SLOWED_SHARE * rates["host"].map(usual))
    hosts = sorted(rates["host"].unique())
    if len(hosts) > 2:  # two hosts share their one link: both are slowed together, and it is named as theirs
        # a second in which every host's link is slowed is the whole network (or the job between steps)
        by_second = rates.groupby("second")
        everyone = by_second["slowed"].transform("all") & (by_second["host"].transform("size") > 1)
        rates = rates[~everyone]
    found = []
    for host, own in rates.groupby("host"):
        slowed = own[own["slowed"]].sort_values("second")["second"].to_list()
        stretches: list[list[int]] = []
        for second in slowed:
            if stretches and second - stretches[-1][-1] <= GAP_S + 1:
                stretches[-1].append(second)
            else:
                stretches.append([second])
        for stretch in stretches:
            first, last = stretch[0], stretch[-1]
            if last - first + 1 < MIN_SLOW_S:
                continue
            during = own[(own["second"] >= first) & (own["second"] <= last)]["bytes_per_s"]
            slow, normal = float(during.median()), float(usual[host])
            share = slow / normal if normal > 0 else 1.0
            epoch_first = start_ns // ev.NS_PER_S + first
            in_stretch = communication[
                (communication["second"] >= epoch_first) & (communication["second"] <= epoch_first + last - first)
            ]
            per_rank = in_stretch.groupby("rank")["communication_s"].sum()
            spent = float(per_rank.mean()) if len(per_rank) else float("nan")
            lost = spent * (1 - share) if np.isfinite(spent) else float("nan")
            ranks = ranks_of.get(str(host), [])
            found.append(
                {
                    "host": str(host),
                    "began_ns": start_ns + first * ev.NS_PER_S,
                    "ended_ns": start_ns + (last + 1) * ev.NS_PER_S,
                    "kind": "slowed_link",
                    "text": f"{host}'s link slowed from {first:.0f} s to {last + 1:.0f} s into the run: its"
                    f" connections carried {slow / ev.BYTES_PER_MB:.3g} MB/s, against"
                    f" {normal / ev.BYTES_PER_MB:.3g} MB/s the rest of the run"
                    + (", while the other nodes' links kept their speed" if len(hosts) > 2 else "")
                    + f"; every collective with {ev.ranks_with_hosts(ranks) if ranks else 'its ranks'}"
                    " moved at that speed"
                    + (
                        f" (the ranks spent {spent:.3g} s each in communication then, about {lost:.3g} s of it"
                        " because of this link)"
                        if np.isfinite(spent)
                        else ""
                    )
                    + ": check the node's port speed and errors (ethtool, its switch), and what else it sent",
                    "seconds_lost": lost,
                    "ranks": ev.rank_list(ranks) if ranks else "",
                }
            )
    if len(hosts) == 2 and found:  # the same stretch seen from both ends: one finding for the link between them
        between = f"the link between {hosts[0]} and {hosts[1]}"
        kept: list[dict[str, Any]] = []
        for finding in sorted(found, key=lambda f: f["began_ns"]):
            if kept and finding["began_ns"] <= kept[-1]["ended_ns"]:
                continue
            own = f"{finding['host']}'s link"
            theirs = f"every collective with {ev.ranks_with_hosts(ranks_of.get(finding['host'], []))}"
            text = finding["text"].replace(own, between, 1).replace(theirs, "every collective between them", 1)
            finding = {**finding, "host": "", "text": text}
            ranks = ranks_of.get(hosts[0], []) + ranks_of.get(hosts[1], [])
            finding["ranks"] = ev.rank_list(sorted(ranks)) if ranks else ""
            kept.append(finding)
        found = kept
    return found


def network_episodes(parts: list[dict]) -> list[dict[str, Any]]:
    """Every link that dropped or slowed in the groups' ``reduce_network`` parts, in the order they began.

    Each: ``kind`` (``link_down``, ``slowed_link``), ``host`` (empty where no one host is to blame),
    ``began_ns``/``ended_ns`` (aligned clock), ``text``, ``seconds_lost``, ``ranks``. A watch reads the
    ones still going on; the analysis makes them findings."""
    frames = [part["rows"] for part in parts if part and len(part["rows"])]
    if not frames:
        return []
    rows = pd.concat(frames, ignore_index=True)
    addresses: dict[str, str] = {}
    for part in parts:
        addresses.update(part["addresses"])
    kept = [part["communication"] for part in parts if len(part["communication"])]
    communication = pd.concat(kept, ignore_index=True) if kept else no_communication()
    starts = [part["start_ns"] for part in parts if part.get("start_ns") is not None]
    start = min(starts) if starts else int(rows["time_ns"].min())
    hosts = {rank: host for part in parts for rank, host in part["hosts"].items()}
    hosts.update({int(rank): str(host) for rank, host in zip(rows["rank"], rows["host"]) if int(rank) not in hosts})
    ranks_of: dict[str, list[int]] = {}
    for rank, host in sorted(hosts.items()):
        ranks_of.setdefault(host, []).append(rank)
    found = link_down_rows(rows, addresses, start, ranks_of)
    found += slowed_link_rows(rows, addresses, start, communication, ranks_of)
    return sorted(found, key=lambda episode: episode["began_ns"])


def network_findings(parts: list[dict], *, wall_s: float | None) -> pd.DataFrame:
    """The ``link_down`` and ``slowed_link`` findings of a run from its groups' ``reduce_network`` parts."""
    found = []
    for episode in network_episodes(parts):
        lost = episode["seconds_lost"]
        found.append(
            {
                "kind": episode["kind"],
                "text": episode["text"],
                "seconds_lost": lost,
                "fraction_of_wall": lost / wall_s if wall_s and np.isfinite(lost) else np.nan,
                "ranks": episode["ranks"],
            }
        )
    return combine_findings(pd.DataFrame(found, columns=[c for c in FINDING_COLUMNS if c != "order"]))
