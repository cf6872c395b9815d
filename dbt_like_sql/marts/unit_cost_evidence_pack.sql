-- Cost of each evidence pack request (all attempts): the unit is one pack.
{% call request_unit_cost('evidence_pack', ['release_packet_id', 'odd_cell']) %}
        c.cost as cost_per_evidence_pack
{% endcall %}
