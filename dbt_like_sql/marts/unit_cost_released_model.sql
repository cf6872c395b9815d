-- Cost of each released model: every request of its recorded lineage tree (label batches, training
-- incl. failed attempts, replays, evidence pack), each once. A release with no recorded lineage
-- (history imported without edges) falls back to the requests sharing its candidate or packet id.
{% call released_lineage_cost('released_model', ['candidate_id', 'release_packet_id'], 'cost_per_released_model') %}
        (rel.candidate_id is not null and r.candidate_id = rel.candidate_id)
        or (rel.release_packet_id is not null and r.release_packet_id = rel.release_packet_id)
{% endcall %}
