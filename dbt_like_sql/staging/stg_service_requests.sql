-- Requests each service answered per 5-minute step (raw_service_requests: Prometheus query_range
-- answers of increase(http_requests_total[5m]) at step 5m, or the recorded series of it). A point
-- counts the window that ends at its timestamp, so it belongs to the day that window ends in: the
-- 00:00 point counts the last 5 minutes of the day before. A service has one count per time: the
-- same point loaded from two files, or from two Prometheus replicas' answers whose series labels
-- differ, counts once (the first source in name order).
with days as (

    select * from {{ ref('int_build_days') }}

),

source as (

    select * from {{ source('raw_service_requests') }}

),

points as (

    select
        d.day,
        s.service,
        coalesce(s.extra_labels, '{}') as series,
        s.ts,
        s.requests,
        s.source,
        s.source_line
    from source as s
    inner join days as d on s.ts > d.day_start and s.ts <= d.day_end
    qualify row_number() over (
        partition by s.service, s.ts order by s.source, s.source_line
    ) = 1

),

final as (

    select day, service, series, ts, requests, source, source_line from points

)

select * from final
