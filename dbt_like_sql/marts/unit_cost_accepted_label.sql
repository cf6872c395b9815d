-- Cost per accepted label of each label batch over its lifetime (every day, every attempt).
{% call request_unit_cost('label_batch', ['lane'], ['accepted_labels', 'rejected_labels']) %}
        {{ cost_per_unit('accepted_labels', 'cost_per_accepted_label', request='batch', unit='label',
            missing='no review result (accepted labels) recorded', missing_finished='no review result (accepted labels) recorded for this batch',
            zero='review accepted no label of this batch: its cost buys no accepted label') }}
{% endcall %}
