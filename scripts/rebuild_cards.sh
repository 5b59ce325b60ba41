#!/usr/bin/env bash
# Rebuild the model cards kept in docs/figures/cards/ with today's code: one recipe run per card (each takes from
# minutes to about two hours on a 2-core CPU), its card copied over the kept one. The commands are the cards' own
# rebuild commands (a curve target's card: the curve's command), with the corpus as a variable: no path of the
# machine that ran them.
#
#   CORPUS=path/to/train_sentences.txt scripts/rebuild_cards.sh            # every kept card
#   CORPUS=path/to/train_sentences.txt scripts/rebuild_cards.sh l3-prune-0.8 # one of them
#
# CORPUS: the unlabeled corpus the cards were made with (train_sentences.txt, one sentence per line; any corpus
# works, docs/guides/your-data.md). RUNS: where the runs go (default runs/). The models are hub ids: offline, a local
# copy named after the id's last part in a folder of $SPARSECSE_MODELS is found (docs/guides/recipes.md). Speed and
# memory are measured on the machine that runs this: the card names its CPU, threads and batch.
set -euo pipefail

CORPUS=${CORPUS:?set CORPUS to the unlabeled corpus, one sentence per line}
RUNS=${RUNS:-runs}
CARDS="$(cd "$(dirname "$0")/.." && pwd)/docs/figures/cards"
SPARSECSE=${SPARSECSE:-sparsecse}

declare -A COMMANDS=(
  [frontier-2x]="--recipe frontier-2x --model sentence-transformers/all-MiniLM-L6-v2"
  [frontier-3.5x]="--recipe frontier-3.5x --model sentence-transformers/paraphrase-MiniLM-L3-v2"
  [l3-prune-0.8]="--recipe l3-prune-0.8 --model sentence-transformers/paraphrase-MiniLM-L3-v2"
  [target-l6-2x]="--model sentence-transformers/all-MiniLM-L6-v2 --speedup 1.5,2,3 --compare-with paraphrase-MiniLM-L3-v2"
)
# where a run keeps the card's model: a curve keeps one per target (its 2x target's is the kept card; the curve's
# targets share their pruning steps, so the curve, not a run of that target alone, remakes it)
declare -A MODELS
MODELS[target-l6-2x]=speedup-2/model

cards=("$@")
[ ${#cards[@]} -gt 0 ] || cards=(frontier-2x frontier-3.5x l3-prune-0.8 target-l6-2x)
for card in "${cards[@]}"; do
  [ -n "${COMMANDS[$card]:-}" ] || { echo "no kept card named $card (${!COMMANDS[*]})" >&2; exit 2; }
  # shellcheck disable=SC2086  # the command's words
  "$SPARSECSE" compress ${COMMANDS[$card]} --corpus "$CORPUS" --out "$RUNS/$card" --overwrite
  cp "$RUNS/$card/${MODELS[$card]:-model}/README.md" "$CARDS/$card.md"
  echo "rebuilt $CARDS/$card.md"
done
