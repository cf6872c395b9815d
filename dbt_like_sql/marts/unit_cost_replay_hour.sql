-- Cost per replayed log hour of each replay request over its lifetime (every day, every attempt).
{% call request_unit_cost('replay', ['lane', 'release_packet_id', 'odd_cell'], ['replay_hours']) %}
        {{ cost_per_unit('replay_hours', 'cost_per_replay_hour', request='replay', unit='replay hour',
            missing='no replayed hours recorded', missing_finished='no replayed log hours recorded for this replay',
            zero='the replay replayed 0 log hours: its cost buys no replay hour') }}
{% endcall %}
