// A token endpoint's answer read (RFC 6749 5.1, 5.2; RFC 6750 b64token): what makes a usable
// Bearer token, and the reasons given when not, which never carry the body or a token.
#include <gtest/gtest.h>

#include "proxy/upstream_auth.hpp"

namespace tollgate::proxy {
namespace {

TEST(TokenAnswer, ATokenWithItsLifetime) {
  const TokenAnswer a = read_token_answer(200, R"({"access_token":"tok-1.a_b~c+d/e==","token_type":"Bearer","expires_in":1799})");
  EXPECT_EQ(a.result, TokenAnswer::ok);
  EXPECT_EQ(a.token, "tok-1.a_b~c+d/e==");
  EXPECT_EQ(a.lifetime, std::chrono::seconds(1799));
  EXPECT_EQ(read_token_answer(200, R"({"access_token":"t","token_type":"bearer","expires_in":"600"})").lifetime,
            std::chrono::seconds(600));
  // No expires_in: five minutes; no token_type: taken as Bearer.
  EXPECT_EQ(read_token_answer(200, R"({"access_token":"t"})").lifetime, std::chrono::seconds(300));
}

TEST(TokenAnswer, UnusableAnswersAreInvalidAndSayWhy) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"<html>oops</html>", "not a JSON object"},
      {R"(["a"])", "not a JSON object"},
      {R"({"token_type":"Bearer","expires_in":60})", "no access_token"},
      {R"({"access_token":42})", "no access_token"},
      {R"({"access_token":"a b"})", "not a Bearer token"},
      {R"({"access_token":"abc\r\nX-Evil: 1"})", "not a Bearer token"},
      {R"({"access_token":"a=b"})", "not a Bearer token"},
      {R"({"access_token":""})", "not a Bearer token"},
      {R"({"access_token":"t","token_type":"mac"})", "not Bearer"},
      {R"({"access_token":"t","expires_in":0})", "expires_in"},
      {R"({"access_token":"t","expires_in":"soon"})", "expires_in"},
  };
  for (const auto& [body, why] : cases) {
    const TokenAnswer a = read_token_answer(200, body);
    EXPECT_EQ(a.result, TokenAnswer::invalid) << body;
    EXPECT_NE(a.why.find(why), std::string::npos) << body << " -> " << a.why;
    EXPECT_TRUE(a.token.empty());
  }
}

TEST(TokenAnswer, AnErrorStatusIsRejectedWithItsErrorCodeOnly) {
  const TokenAnswer a = read_token_answer(401, R"({"error":"invalid_client","error_description":"secret s3cr3t wrong"})");
  EXPECT_EQ(a.result, TokenAnswer::rejected);
  EXPECT_NE(a.why.find("401"), std::string::npos);
  EXPECT_NE(a.why.find("invalid_client"), std::string::npos);
  EXPECT_EQ(a.why.find("s3cr3t"), std::string::npos);
  // A token in an error answer is not taken.
  EXPECT_EQ(read_token_answer(500, R"({"access_token":"t"})").result, TokenAnswer::rejected);
  EXPECT_EQ(read_token_answer(302, "").result, TokenAnswer::rejected);
}

}  // namespace
}  // namespace tollgate::proxy
