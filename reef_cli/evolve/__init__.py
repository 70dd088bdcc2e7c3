"""Orchestration of Loops 1 and 2: reflect → plan → guard → decide (gate, admission) → publish → record, plus review,
promote, reject, demote.

Modules: common (options, outcome, memory, negative evidence), journal (the typed evolve in flight), pipeline
(reflect and evolve, one function per step), admission (per-bullet admission), publish + worktree (the one door a
release and the working tree go through together), proposals (proposals and the human verbs).

One `evolve` publishes at most one release. Its `evidence` lists the observation record ids behind the bullets it
changes (plus the gate's verdict record); its `reason` lists the bullet operations; its `meta` carries the
operations (`bullets`), the pattern keys, the gate verdict or the "not gated" warning, and `evolve_id`.

Decisions (where the issue is silent):

* **Which config governs** an evolve: the head release's harness.yaml, never the working tree's, so an unpublished
  edit of the zone map cannot loosen the guard for an automatic write.
* **Where memory comes from**: the working tree's memory file when it exists (a standalone `reef harness reflect`
  wrote it), else the head release's. After a rollback the working tree holds the old memory, so the fold simply
  re-reads the records after its mark.
* **Gating.** With canary tasks, every bullet change (Learned or Evolvable) is gated as one candidate, each new
  bullet attributed (see admission below); a publish verdict publishes what was admitted, a reject publishes only pattern memory (bookkeeping no agent reads) and records
  negative evidence for the keys whose bullets were new to the harness. A candidate that only moves bullets up
  the ladder or removes them (expiry, budget) is neutral by intent: it publishes when no canary task got worse
  (every per-task status "same" or "improved"), since requiring an improvement would refuse every promotion.
  Memory-only changes are never gated. Without canary tasks,
  Learned-zone groups publish after guard, schema and budget checks with a "not gated" warning, and Evolvable
  groups and contradictions wait in a pending proposal for `reef harness promote`.
* **Contradictions** go to the gate as "take the new bullet" (the old one removed); when the gate publishes, the
  loser's key gets negative evidence, when it rejects, the newcomer's. Without a gate they wait for a human.
* **Human verbs.** `promote` is a human decision: it re-applies the proposal's bullet operations on the *current*
  head (budgets, schema and the zone guard run again; the gate does not — the human is the judge), publishes with
  operation `promote`, and writes a `promotion` record that lifts negative evidence on those keys. `promote KEY`
  with nothing pending promotes that pattern one surface up, whatever its count. `reject` writes negative evidence
  for every key of the proposal. `demote` removes the pattern's bullets everywhere, resets its count and writes
  negative evidence (a `negative` record with `reset`).
* **Rollback** of a release that added bullets (evolve or promote) is negative evidence for those keys; it is
  found by reading rollback releases from the release log at the start of every reflect/evolve, and written once
  (deterministic record ids, plus `evolve/rollbacks.json`).
* **Crash safety.** A typed journal (journal.py, `.reef/scenarios/<s>/evolve/journal.json`, atomic writes) holds
  the base release, the memory bytes, the final bullet operations and the working tree's bytes at every target
  before anything irreversible; the candidate is recomputed from them byte for byte, the gate resumes from its own
  journal, and the release carries `meta.evolve_id`. A re-run finds the journal: if the release exists it finishes
  the bookkeeping, if the head is still the base it resumes (the gate, or the working-tree write), otherwise the
  stale journal is dropped. `in_flight(store)` says so for `reef status`.
* **Working tree, then release** (publish.py, worktree.py). The working-tree write comes first and the publish
  second, so a release never exists whose files did not reach the working tree: each target is compare-and-swapped
  against the bytes the plan was made from right before it is replaced (a user's edit made while the gate ran is
  never overwritten: exit 3, nothing written or published), every new file is staged in a temp file first (a full
  disk fails before anything is replaced), a read-only file is refused (exit 4), and a refused publish puts the
  written files back. A kill between the write and the publish leaves phase `writing`: the resume publishes (files
  already written are skipped; a file the user edited since stops it with exit 3). A kill after the publish leaves
  only bookkeeping: the resume never writes the working tree again, so a user's edit made meanwhile survives.
* **Every new bullet earns its place** (admission.py): the gate attributes each new bullet (leave-one-out) and only
  those with positive utility publish; when some are dropped the admitted subset is gated again on its own bytes.
  Lessons that read as an instruction injection or a permission escalation (reef_cli/screen.py) are blocked in the
  plan, before any gate, as negative evidence (origin `guard`, kind `injection`/`escalation`).
* **Idempotence.** Ledger records written by evolve have deterministic ids, so a resend is a no-op, and a bullet is
  addressed by its stable id, so nothing is ever duplicated. Test-only fault points:
  `REEF_FAULT=evolve:planned|gated|writing|published|branched` SIGKILLs the process there.
* **Clock**: `now` is injected (the CLI reads `REEF_NOW`, ISO 8601, for tests and replays).

Files under `.reef/scenarios/<s>/evolve/` (canonical JSON, written atomically):

* `journal.json` — the evolve in flight (`journal.EvolveJournal`): `{version: 2, evolve_id, base_release_id, phase:
  planned|gated|writing|published, memory (the pattern-memory bytes), ops [bullet operations], contradictions, gated,
  verdict, admission, expected {path: sha256|null}, release_id, warnings, …}`.
* `proposals/prop_<12 hex>.json` — a proposal waiting for a human (`--review`, or Evolvable edits and
  contradictions without a gate): `{version, proposal_id, status: pending|promoted|rejected|superseded, mode:
  review|needs-human, created_at, base_release_id, ops, contradictions, blocked, keys, evidence, diff [per-bullet
  lines], memory, record_id}`. The id hashes the base release, the operations and the memory, so the same
  proposal is written once; a newer pending proposal over the same keys supersedes an older one.
* `rollbacks.json` — rollback releases already turned into negative evidence.
* `<evolve_id>/gate/` — the gate's episode journal for that evolve; `<evolve_id>/gate-admitted/` that of the
  admitted subset, when admission dropped a bullet.

A bullet operation (`curate.Op`): `{op: add|update|remove|merge, surface: notes|block|skill, path, bullet_id, key,
text, old_text, reason, zone, tier, group}`; one group (a pattern's move, a merge, a contradiction's resolution) is
applied or refused as a whole. Ledger records written here: `reflect`, `rejection`, `proposal`, `negative`
(`{key, text, polarity, origin: gate|human|rollback|guard|contradiction, reason, needed, path?, reset?}`) and
`promotion` (`{key, human: true, proposal_id, release_id}`).
"""

from __future__ import annotations

from .common import (Options, Outcome, evolve_dir, load_memory, make_backend, memory_path, record_rollback_negatives,
                     with_memory, write_negatives)
from .journal import EvolveJournal, JournalFile
from .pipeline import ReflectOutcome, evolve, in_flight, run_reflect
from .proposals import demote, find_proposal, list_proposals, promote, reject, write_proposal
from .publish import publish_gated

__all__ = ["Options", "Outcome", "ReflectOutcome", "EvolveJournal", "JournalFile", "evolve", "in_flight", "run_reflect", "promote",
           "reject", "demote", "list_proposals", "find_proposal", "write_proposal", "publish_gated", "load_memory",
           "memory_path", "with_memory", "make_backend", "evolve_dir", "write_negatives", "record_rollback_negatives"]
