#!/usr/bin/env bash
# The ranker variants of docs/graph-tuning.md ("What did not pay"), scored on held-out folds by
# `benchmarks/graph_retrieval.py ablate`. The candidate features (entity_with_top ... bridge_cosine)
# and bridge_hits were reverted after this measurement: run the feature variants at commit 9036a13
# (`git checkout 9036a13 -- src benchmarks`); the v1-feature variants run at any later commit too.
# Needs runs/graph-cv.json from `python benchmarks/graph_retrieval.py cv --ranker` (each fold's settings).
# Runs 1-4 measured the v1 ranker (18 features, fused top 30 only, one model) with the 20-question fixtures
# set (before the MuSiQue examples joined it): to reproduce them at a later commit, give each variant
# "entity_hits":0,"bag":1 and drop fixtures/musique_example.jsonl from SETS. Run 5 is the v2 choice.
set -euo pipefail
PY=${PY:-python}
W=${WORK:-indexes/bench-graph}
V1='"fused","fused_rank","first","first_rank","graph","linked","linked_count","named_by_top","names_top","named_by_top1","two_hops_from_top","named_by_linked","names_linked","log_in_degree","log_out_degree","title_in_question","dense_cosine","dense_to_top1"'
F="\"features\":[$V1]"
NEW='"entity_with_top","max_cosine_top","cosine_to_linked","named_by_fused_top","three_hops_from_top"'
A="\"features\":[$V1,$NEW]"
mkdir -p runs
# 1. candidate features, one at a time and together (default settings on every fold; bridge queries on)
$PY benchmarks/graph_retrieval.py ablate --work "$W" --set bridge_hits=2 \
  --variant v1 "{$F}" --variant v1+entity_with_top "{\"features\":[$V1,\"entity_with_top\"]}" \
  --variant v1+max_cosine_top "{\"features\":[$V1,\"max_cosine_top\"]}" \
  --variant v1+cosine_to_linked "{\"features\":[$V1,\"cosine_to_linked\"]}" \
  --variant v1+named_by_fused_top "{\"features\":[$V1,\"named_by_fused_top\"]}" \
  --variant v1+three_hops_from_top "{\"features\":[$V1,\"three_hops_from_top\"]}" \
  --variant v1+bridge_cosine "{\"features\":[$V1,\"bridge_cosine\"]}" \
  --variant all-but-bridge "{$A}" --variant all "{}" \
  --variant all-binary '{"params":{"objective":"binary","metric":"auc"}}' \
  --variant v1-binary "{$F,\"params\":{\"objective\":\"binary\",\"metric\":\"auc\"}}" \
  --variant all-depth50 '{"rerank_depth":50}' --variant all-depth40 '{"rerank_depth":40}' \
  --variant v1-depth50 "{$F,\"rerank_depth\":50}" > runs/graph-ablate1.json
# 2. two-hop candidates (question + passage dense queries fused into the first stage), each fold's settings
for hops in 3 2; do
  $PY benchmarks/graph_retrieval.py ablate --work "$W" --fold-settings runs/graph-cv.json --set two_hop=true \
    --set hop_passages=$hops --variant v1 "{$F}" --variant v1+entity_with_top "{\"features\":[$V1,\"entity_with_top\"]}" \
    --variant v1+cosine_to_linked "{\"features\":[$V1,\"cosine_to_linked\"]}" --variant all-but-bridge "{$A}" \
    --variant v1-depth50 "{$F,\"rerank_depth\":50}" --variant v1-depth40 "{$F,\"rerank_depth\":40}" \
    > runs/graph-ablate-2hop$hops.json
done
# 3. LightGBM settings and training weights, each fold's settings
$PY benchmarks/graph_retrieval.py ablate --work "$W" --fold-settings runs/graph-cv.json \
  --variant v1 "{$F}" --variant v1-leaves7 "{$F,\"params\":{\"num_leaves\":7}}" \
  --variant v1-rounds100 "{$F,\"rounds\":100}" --variant v1-rounds400 "{$F,\"rounds\":400}" \
  --variant v1-minleaf50 "{$F,\"params\":{\"min_data_in_leaf\":50}}" \
  --variant v1-trunc30 "{$F,\"params\":{\"lambdarank_truncation_level\":30}}" \
  --variant v1-xendcg "{$F,\"params\":{\"objective\":\"rank_xendcg\"}}" \
  --variant v1-musique2 "{$F,\"set_weights\":{\"musique\":2}}" --variant v1-musique3 "{$F,\"set_weights\":{\"musique\":3}}" \
  --variant all-leaves7 "{$A,\"params\":{\"num_leaves\":7}}" --variant all-musique2 "{$A,\"set_weights\":{\"musique\":2}}" \
  > runs/graph-ablate-hp.json
# 4. another first stage for the graph retriever (weighted RRF, dense alone), each fold's settings
$PY benchmarks/graph_retrieval.py ablate --work "$W" --fold-settings runs/graph-cv.json \
  --first-stage '{"kind": "hybrid", "weights": [0.5, 1.0]}' --variant v1 '{}' --variant v1-depth50 '{"rerank_depth":50}' \
  > runs/graph-ablate-w05.json
$PY benchmarks/graph_retrieval.py ablate --work "$W" --fold-settings runs/graph-cv.json \
  --first-stage '{"kind": "dense"}' --variant v1 '{}' --variant v1-depth50 '{"rerank_depth":50}' \
  > runs/graph-ablate-dense.json
# 5. ranker v2: the passages sharing an entity with the fused top 3 as candidates (entity_hits), the v2
#    edge features, a bag of 5 models; every combination, and the choice among them by nested CV
V2="\"features\":[$V1,\"entity_with_fused_top\",\"entities_with_fused_top\",\"mention_with_fused_top\",\"two_mentions_from_fused_top\",\"in_fused_top\"]"
$PY benchmarks/graph_retrieval.py ablate --work "$W" --fold-settings runs/graph-cv.json --nested \
  --variant v1 "{$F,\"entity_hits\":0,\"bag\":1}" --variant v1-bag5 "{$F,\"entity_hits\":0}" \
  --variant v2-features "{$V2,\"entity_hits\":0,\"bag\":1}" --variant v2-features-bag5 "{$V2,\"entity_hits\":0}" \
  --variant v1+entity-candidates "{$F,\"bag\":1}" --variant v1+entity-candidates-bag5 "{$F}" \
  --variant v2-one-model "{$V2,\"bag\":1}" --variant v2 "{$V2}" > runs/graph-ablate-v2.json
