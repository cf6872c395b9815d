-- The UTC days being built (day_from .. day_to), with each day's bounds as timestamps: the calendar
-- every per-day model joins to, so a day without rows still has its row where a model wants one.
with final as (

    select
        cast(d as date) as day,
        cast(d as timestamp) as day_start,
        cast(d as timestamp) + interval 1 day as day_end
    from unnest(generate_series(
        {{ var('day_from') }}::timestamp, {{ var('day_to') }}::timestamp, interval 1 day
    )) as t(d)

)

select * from final
