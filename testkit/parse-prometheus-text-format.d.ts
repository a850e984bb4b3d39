/** Types of the `parse-prometheus-text-format` dev dependency (it ships none). */
declare module "parse-prometheus-text-format" {
  /** Metric families of a Prometheus text exposition, in prom2json's shape. */
  export default function parsePrometheusTextFormat(text: string): {
    name: string;
    help: string;
    type: string;
    metrics: { value?: string; labels?: Record<string, string>; buckets?: Record<string, string> }[];
  }[];
}
