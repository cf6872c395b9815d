{#- Cost allocation: totals per day and currency of the days built. -#}

{#- `select day, currency, <the caller's aggregates> from ref(model)` for the days built (and,
    for each entry of `equal`, the rows whose column equals that literal), grouped by day and
    currency: the pools and totals chargeback and reconciliation read. -#}
{% macro day_currency_totals(model, equal={}) -%}
select
        day,
        currency,
        {{ caller() | trim }}
    from {{ ref(model) }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    {%- for column, value in equal | dictsort %} and {{ column | ident }} = {{ value | literal }}{% endfor %}
    group by day, currency
{%- endmacro %}
