-- Cost of each released map: every request of its recorded lineage tree, each once; without recorded
-- lineage, itself plus the map segmentation requests of its release packet.
{% call released_lineage_cost('released_map', ['release_packet_id'], 'cost_per_released_map') %}
        (rel.release_packet_id is not null and r.release_packet_id = rel.release_packet_id
            and r.workload in ('map_segmentation', 'released_map'))
{% endcall %}
